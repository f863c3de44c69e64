"""The adapter for vLLM's own DSpark code in its V2 model runner (vllm 0.33.0, the CUDA wheel), on CPU: one mixin
per level. vLLM's V2 kernels are Triton only; on CPU they run in Triton's interpreter (`env`).

It builds vLLM's objects through vLLM's own constructors (SamplingParams, RequestState, Sampler, RejectionSampler,
expand_idx_mapping) and calls the entry point the V2 model runner calls for a DSpark step (`RejectionSampler.__call__`
-> `rejection_sample`), then reads its outputs. Substitutes, each with what it can hide: `env`, `runtime`, `verify`,
`dp` docstrings and docs/engines/vllm-dspark.md.

Engines: `vllm-dspark` (VLLMDSparkAdapter) verifies with chain rejection sampling (rejection_sample_method
"standard", vLLM's default); `vllm-dspark-block` (VLLMDSparkBlockAdapter) with block verification ("block").

Declared: verify, verify.distributions, verify.chain-sampling (chain class only), dp-metadata.padding (the V2 runner's
`sync_cudagraph_and_dp_padding` on real gloo ranks: `dp`), request.verify with request.penalties and
request.min-new-tokens (REQ-005: greedy whole requests through SamplingParams, the runner's post_update, the sampler's
logits processors and the RejectionSampler: `request`). Not declared, with the reason: request.min-p and
request.logit-bias (SamplingParams.verify refuses min_p and logit_bias once speculative decoding is on,
sampling_params.py:1185-1197, so no DSpark request carries them), request and request.state (no step level: no V2
scheduler loop runs on CPU), verify.injected-noise (V2 hashes its coins and noise from the request seed and position),
verify.placeholders (V2 leaves the slots past num_sampled unwritten; the adapter pads), verify.float64 (vLLM verifies
in float32), verify.empty-batch (the runner never calls the rejection sampler with no request), verify.cap-trim (vLLM
never sees the drafts past a row's scheduled length), dp-metadata (SGLang's draft-batch DP fill; vLLM has no such
object), draft (the contracts' draft level is SGLang's DSpark worker layout; the speculator's Markov block sampling is
the pack method `markov_draft`, checked by tests/vllm_dspark/test_draft_markov.py), handoff (no speculative-state
handoff object in vLLM: draft KV travels as KV-cache groups through the KV connector), kv, graph, planner, step,
ranks, relay.confidence (no CPU-runnable counterpart).
"""

from __future__ import annotations

from contracts import protocol
from contracts.adapters.vllm_dspark import env as vllm_dspark_env
from contracts.adapters.vllm_dspark.dp import VLLMDSparkDpPadding
from contracts.adapters.vllm_dspark.draft import VLLMDSparkMarkovDraft
from contracts.adapters.vllm_dspark.draft_inputs import VLLMDSparkDraftInputs
from contracts.adapters.vllm_dspark.ledger import BLOCK_KNOWN_FAILURES, KNOWN_FAILURES
from contracts.adapters.vllm_dspark.request import VLLMDSparkRequestVerify
from contracts.adapters.vllm_dspark.shares import DRAW_SHARES, EXAMPLE_SHARES
from contracts.adapters.vllm_dspark.verify import VLLMDSparkVerify
from contracts.boundary.engine import RequestSemantics

# What vLLM's SamplingParams takes, by the neutral names of contracts.protocol.REQUEST_PARAMETERS: eos_id is the
# model's EOS (the input processor hands it to update_from_generation_config), max_new_tokens its max_tokens,
# min_new_tokens its min_tokens, stop_strings its `stop`, grammar its structured_outputs, custom_logit_processor the
# engine's --logits-processors with the request's extra_args (V2 runs them in apply_sampling_params). min_p and
# logit_bias are taken by SamplingParams but refused by its verify once speculative decoding is on
# (sampling_params.py:1185-1197), so no DSpark request carries them: accepted, not exercised.
ACCEPTED_PARAMETERS = ("temperature", "top_k", "top_p", "max_new_tokens", "eos_id", "frequency_penalty",
                       "presence_penalty", "repetition_penalty", "min_new_tokens", "min_p", "logit_bias",
                       "stop_token_ids", "ignore_eos", "stop_strings", "seed", "n", "logprobs", "grammar",
                       "custom_logit_processor")
# vLLM's reading (vllm/v1/worker/gpu/sample/penalties.py:162-182): repetition scales every token the prompt or the
# output holds (prompt_bin_mask | output_bin_mask), then frequency and presence subtract; ignore_eos drops the EOS id
# only (sampling_params.py:781-787; stop_token_ids still stop, v1/core/sched/utils.py:109-112).
REQUEST_SEMANTICS = RequestSemantics(repetition_counts_prompt=True, repetition_before_additive=True,
                                     ignore_eos_ignores_stop_ids=False)
# The families REQ-005 exercises through the V2 path (request.py). Not request.min-p, request.logit-bias: refused
# with speculative decoding (above).
REQUEST_CAPABILITIES = frozenset({protocol.REQUEST_VERIFY, protocol.REQUEST_PENALTIES,
                                  protocol.REQUEST_MIN_NEW_TOKENS})


class VLLMDSparkAdapter(VLLMDSparkVerify, VLLMDSparkRequestVerify, VLLMDSparkDpPadding, VLLMDSparkMarkovDraft,
                        VLLMDSparkDraftInputs):
    name = "vllm-dspark"
    device = "cpu"
    tested_versions = (vllm_dspark_env.VLLM_VERSION,)
    known_failures = KNOWN_FAILURES
    accepted_parameters = ACCEPTED_PARAMETERS
    request_semantics = REQUEST_SEMANTICS
    # Contracts whose inputs vLLM's own producers never emit: run only with --hardening, never findings.
    hardening = {"VERIFY-012": "vLLM's speculators draft ids from the draft vocabulary (mapped into the target's by "
                               "map_draft_to_target) and mark placeholders -1; no producer emits a draft id >= V"}
    # Contracts whose rule the engine changed on purpose upstream: known failures that are not findings.
    by_design = {cid: "V2 microbatches whenever every rank allows it and runs an empty last microbatch as a dummy "
                      "batch (V1's is_last_ubatch_empty fallback dropped in vllm-project/vllm#50945); the contract "
                      "holds V1's rule" for cid in ("DPPAD-003", "DPPAD-004", "DPPAD-005")}
    # The plain check's shares of each slow contract's examples and Monte-Carlo rows: `shares`.
    example_shares = EXAMPLE_SHARES
    draw_shares = DRAW_SHARES
    # --coverage: the V2 DSpark verification and DP code the levels reach, and REQ-005's logits processors.
    coverage_modules = ("vllm.v1.worker.gpu.spec_decode.rejection_sampler",
                        "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils", "vllm.v1.worker.gpu.sample.gumbel",
                        "vllm.v1.worker.gpu.dp_utils", "vllm.v1.worker.gpu.spec_decode.dspark.speculator",
                        "vllm.v1.worker.gpu.sample.sampler", "vllm.v1.worker.gpu.sample.penalties",
                        "vllm.v1.worker.gpu.sample.logit_bias")
    capabilities = frozenset({protocol.VERIFY, protocol.VERIFY_DISTRIBUTIONS, protocol.VERIFY_CHAIN,
                              protocol.VERIFY_MIXED, protocol.DP_PADDING, protocol.DRAFT, protocol.DRAFT_MARKOV}
                             | REQUEST_CAPABILITIES)

    def __init__(self):
        vllm_dspark_env.check_vllm_dspark_installed()  # every load: one line naming the install command
        vllm_dspark_env.prepare_vllm_dspark_import()
        import vllm

        self.version = vllm.__version__


class VLLMDSparkBlockAdapter(VLLMDSparkAdapter):
    """vLLM V2 with block verification (`speculative_config.rejection_sample_method="block"`): the block's law is the
    target's, token-by-token laws are not the chain rule's, so verify.chain-sampling is not declared."""

    name = "vllm-dspark-block"
    verification_method = "block"
    known_failures = BLOCK_KNOWN_FAILURES
    capabilities = VLLMDSparkAdapter.capabilities - {protocol.VERIFY_CHAIN}
