"""The adapter for the real SGLang 0.5.23 DSpark code, on CPU: one mixin per level.

It builds SGLang's inputs through SGLang's own constructors (ServerArgs and its
config bags, ModelConfig, the request pool, allocators and radix cache, Req,
ScheduleBatch.init_new, FutureMap, DraftBlockProposer) and calls the entry
points the scheduler and worker call, then reads the outputs. What a CPU host
forces it to substitute is listed, with what each substitution can hide, in the
docstrings of `runtime` (kernel entries without a CPU path) and `draft` (the
draft model's forward and LM head, the parallel context). Levels SGLang does
not run on CPU are not declared; their contracts are reported as skipped.
"""

from __future__ import annotations

from contracts import protocol
from contracts.adapters.sglang import env as sglang_env
from contracts.adapters.sglang.dp import SGLangDpMetadata
from contracts.adapters.sglang.draft_level import SGLangDraft
from contracts.adapters.sglang.graph import SGLangGraph
from contracts.adapters.sglang.handoff import SGLangHandoff
from contracts.adapters.sglang.kv import SGLangKv
from contracts.adapters.sglang.planner import SGLangPlanner
from contracts.adapters.sglang.ranks import SGLangRanks
from contracts.adapters.sglang.relay import SGLangRelay
from contracts.adapters.sglang.runtime import runtime
from contracts.adapters.sglang.verify import SGLangVerify


class SGLangAdapter(SGLangHandoff, SGLangDpMetadata, SGLangKv, SGLangGraph, SGLangPlanner, SGLangDraft, SGLangRanks,
                    SGLangRelay, SGLangVerify):
    name = "sglang"
    device = "cpu"
    # Not declared: verify.injected-noise (SGLang draws its own coins and Gumbel noise), verify.placeholders
    # (out_tokens past commit_len keep the rejected drafts), step (needs a model runner with weights).
    capabilities = frozenset({protocol.HANDOFF, protocol.DP_METADATA, protocol.KV, protocol.GRAPH, protocol.PLANNER,
                              protocol.DRAFT, protocol.VERIFY, protocol.VERIFY_DISTRIBUTIONS, protocol.VERIFY_CHAIN,
                              protocol.VERIFY_CAP_TRIM, protocol.RANKS_TP, protocol.RELAY})

    def __init__(self):
        sglang_env.check_sglang_installed()  # every load: one line naming the install command, never a fallback
        runtime()
        import sglang

        self.version = sglang.__version__


class SGLangChainAdapter(SGLangAdapter):
    """SGLang with every sampled accept on its default path, `AcceptSampling`'s chain kernel (Triton, through the
    interpreter on CPU: about 10 ms a row, so the Monte-Carlo contracts take tens of minutes here)."""

    name = "sglang-chain"
    use_blockwise_rejection = False
