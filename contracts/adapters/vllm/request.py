"""request.verify on vLLM: one greedy verify batch of whole requests, as the V1 model runner verifies a speculative
step (`GPUModelRunner._update_states`, then `_sample`).

Built through vLLM's own objects, in the runner's order:
* per request, `SamplingParams` (its own validation, `_verify_args`) with the penalties, `min_tokens`,
  `stop_token_ids` and `max_tokens`; the EOS id through `update_from_generation_config`, the call the engine's
  `InputProcessor` makes, so `all_stop_token_ids` (what `min_tokens` masks) holds it; then
  `_validate_spec_decode(speculative_config)`, the admission `SamplingParams.verify` runs under speculation;
* the logits processors `build_logitsprocs` builds for a `VllmConfig` whose `speculative_config` is set (an n-gram
  one: the drafter never runs here, and every drafter gets the same processors): only `MinTokensLogitsProcessor`;
* an `InputBatch` holding them, a `CachedRequestState` per request (prompt, committed output) added with
  `add_request`, its drafts set by `update_req_spec_token_ids` (the scheduler's `scheduled_spec_decode_tokens`),
  then `refresh_metadata`: the processors are fed the batch's `BatchUpdate` and the `SamplingMetadata` is built
  (penalties, prompt_token_ids, output_token_ids, spec_token_ids);
* the spec-decode metadata from `GPUModelRunner._calc_spec_decode_metadata`, then `RejectionSampler.forward` over a
  real `Sampler` (the bonus through `Sampler.forward(predict_bonus_token=True)`), read by `parse_output`. When no
  request has a draft the runner builds no spec metadata and the `Sampler` samples alone; so does this.

Substituted (what it can hide): the model runner (the fields `_calc_spec_decode_metadata` reads: see `runtime`;
hides a bug in how `_prepare_inputs` fills them); the target model (the row's raw logits, in float32, the dtype of
vLLM's logits); the scheduler (the drafts it schedules are the row's: hides a bug in how it trims them).

Not exercised: logit_bias and min_p. Under speculation vLLM refuses them at admission
(`SamplingParams._validate_spec_decode`, vllm/sampling_params.py:1190: "not yet supported with speculative
decoding"; a greedy request's min_p is reset to 0 at construction) and builds no `LogitBiasLogitsProcessor` or
`MinPLogitsProcessor` (vllm/v1/sample/logits_processor/__init__.py:208-216 logs "min_p and logit_bias parameters
won't work with speculative decoding"). A request vLLM refuses is no finding, so the pack leaves request.logit-bias
and request.min-p undeclared and the report lists them as accepted but not exercised. Upstream work to lift the
refusal: vllm-project/vllm#38467 (logit_bias, PR closed, for #38202) and #42802 (min_p, PR open).
"""

from __future__ import annotations

import logging
from functools import lru_cache

import numpy as np
import torch

from contracts.adapters.vllm import runtime
from contracts.boundary.verify import RequestVerifyCase

CPU = runtime.CPU
_MAX_MODEL_LEN = 64


@lru_cache(maxsize=None)
def _spec_config(gamma: int):
    """A VllmConfig with an n-gram speculative config of `gamma` tokens (no model: the drafter never runs here)."""
    from vllm.config import SpeculativeConfig, VllmConfig

    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=gamma, prompt_lookup_max=gamma, prompt_lookup_min=1)
    return VllmConfig(speculative_config=spec)


def _logitsprocs(config):
    """build_logitsprocs as the model runner calls it (no custom processors); its per-batch warning silenced."""
    from vllm.v1.sample.logits_processor import build_logitsprocs

    log = logging.getLogger("vllm.v1.sample.logits_processor")
    level = log.level
    log.setLevel(logging.ERROR)  # one "won't work with speculative decoding" line per case would drown the report
    try:
        return build_logitsprocs(config, CPU, False, False, ())
    finally:
        log.setLevel(level)


def sampling_params(request, config):
    """vLLM's SamplingParams for a greedy RequestSpec, through the engine's own admission path."""
    from vllm.sampling_params import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=request.max_new_tokens,
                            frequency_penalty=request.frequency_penalty, presence_penalty=request.presence_penalty,
                            repetition_penalty=request.repetition_penalty, min_tokens=request.min_new_tokens,
                            stop_token_ids=list(request.stop_token_ids), ignore_eos=request.ignore_eos,
                            min_p=request.min_p, logit_bias=dict(request.logit_bias) or None)
    params.update_from_generation_config({}, request.eos_id)  # InputProcessor: the model's EOS joins all_stop_token_ids
    params._validate_spec_decode(config.speculative_config)  # SamplingParams.verify's check under speculation
    return params


class VLLMRequestVerify:
    def verify_requests(self, case: RequestVerifyCase) -> list:
        runtime.prepare()
        from vllm.v1.sample.rejection_sampler import RejectionSampler
        from vllm.v1.worker.gpu_input_batch import CachedRequestState, InputBatch

        rows, bs = case.rows, len(case.rows)
        if bs == 0:
            raise ValueError("rows: vLLM's model runner never samples an empty batch")
        config = _spec_config(case.gamma)
        n = np.array([len(r.drafts) for r in rows], dtype=np.int32)
        batch = InputBatch(max_num_reqs=bs, max_model_len=_MAX_MODEL_LEN, max_num_batched_tokens=bs * (case.gamma + 1),
                           device=CPU, vocab_size=case.vocab, block_sizes=[16], max_num_blocks_per_req=[4],
                           logitsprocs=_logitsprocs(config), num_spec_tokens=case.gamma)
        drafts = {}
        for i, row in enumerate(rows):
            state = CachedRequestState(req_id=f"r{i}", prompt_token_ids=list(row.request.prompt), mm_features=[],
                                       sampling_params=sampling_params(row.request, config), generator=None,
                                       block_ids=([0],), num_computed_tokens=len(row.request.prompt) + len(row.output) - 1,
                                       output_token_ids=list(row.output))
            drafts[state.req_id] = list(row.drafts)
            batch.add_request(state)
            batch.update_req_spec_token_ids(state, drafts)  # GPUModelRunner._update_states, for a new request
        batch.refresh_metadata()
        scheduled = torch.tensor([t for r in rows for t in (r.output[-1],) + tuple(r.drafts)], dtype=torch.int32)
        logits = torch.tensor([x for r in rows for x in r.logits], dtype=torch.float32)
        view, runner = runtime.runner_view(batch, scheduled, None)
        sampler = runtime.rejection_sampler()
        if n.any():  # GPUModelRunner._prepare_inputs: spec metadata only when some request has drafts scheduled
            metadata = runner._calc_spec_decode_metadata(view, n, np.cumsum(n + 1))
            draft_probs = runner._get_spec_decode_draft_probs(view, metadata)  # None: an n-gram drafter's drafts
            out = sampler(metadata, draft_probs, logits, batch.sampling_metadata)
        else:
            out = sampler.sampler(logits=logits, sampling_metadata=batch.sampling_metadata)
        emitted, _ = RejectionSampler.parse_output(out.sampled_token_ids, case.vocab)
        return [[int(t) for t in row] for row in emitted]
