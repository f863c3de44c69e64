"""vLLM imported once per process, and its V1 objects for one verify step built as its model runner builds them.

Everything here is vLLM's own code: `SamplingParams` per request (temperature, top-k, top-p, a seed), a
`CachedRequestState` per request with the per-request `torch.Generator` the model runner makes for a seeded
request (`GPUModelRunner._update_states`: `Generator().manual_seed(params.seed)`), an `InputBatch` that
`add_request`s them and builds the `SamplingMetadata` (`refresh_metadata`), `GPUModelRunner._calc_spec_decode_metadata`
(the logits indices and draft ids from the flattened scheduled tokens), `GPUModelRunner._get_spec_decode_draft_probs`
(the draft probabilities of the scheduled drafts), and the `RejectionSampler` over a real `Sampler`, called as
`GPUModelRunner._sample` calls it.

Substituted (what it can hide):
* the model runner itself: the two runner methods are called on a namespace holding only the fields they read
  (`arange_np`, `_arange_scratch`, `device`, `input_ids.gpu`, `input_batch`, `_draft_probs`, `_draft_prob_req_ids`);
  hides: a bug in how the runner fills those buffers (`_prepare_inputs`).
* the target model: the logits of the scheduled tokens are the case's target logits, laid out per request as
  the runner's `compute_logits(hidden[logits_indices])` lays them out (n drafts' rows, then the bonus row).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from contracts.adapters.vllm import env as vllm_env

CPU = torch.device("cpu")
_SEED_STRIDE = 1_000_003  # per-request seeds: seed * stride + row


def prepare():
    vllm_env.prepare_vllm_import()


def input_batch(settings, anchors, gamma: int, vocab: int, seed: int):
    """An InputBatch holding one request per (temperature, top_k, top_p) in `settings`; temperature 0 = greedy."""
    prepare()
    from vllm.sampling_params import SamplingParams, SamplingType
    from vllm.v1.worker.gpu_input_batch import CachedRequestState, InputBatch

    bs = len(settings)
    batch = InputBatch(max_num_reqs=max(bs, 1), max_model_len=64, max_num_batched_tokens=max(bs, 1) * (gamma + 1),
                       device=CPU, vocab_size=vocab, block_sizes=[16], max_num_blocks_per_req=[4], num_spec_tokens=gamma)
    for i, (t, k, p) in enumerate(settings):
        params = SamplingParams(temperature=t, top_k=k, top_p=p, seed=(int(seed) * _SEED_STRIDE + i) % (2 ** 62),
                                max_tokens=16)
        generator = None
        if params.sampling_type == SamplingType.RANDOM_SEED:  # as GPUModelRunner._update_states makes it
            generator = torch.Generator(device=CPU)
            generator.manual_seed(params.seed)
        batch.add_request(CachedRequestState(req_id=f"r{i}", prompt_token_ids=[0], mm_features=[], sampling_params=params,
                                             generator=generator, block_ids=([0],), num_computed_tokens=1,
                                             output_token_ids=[int(anchors[i])]))
    batch.refresh_metadata()
    return batch


def runner_view(batch, scheduled_ids: torch.Tensor, draft_probs):
    """The fields of a GPUModelRunner that _calc_spec_decode_metadata and _get_spec_decode_draft_probs read."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    size = max(batch.num_reqs + 1, int(scheduled_ids.numel()))
    view = SimpleNamespace(arange_np=np.arange(size, dtype=np.int64), _arange_scratch=np.empty(size, dtype=np.int64),
                           device=CPU, input_ids=SimpleNamespace(gpu=scheduled_ids), input_batch=batch,
                           _draft_probs=draft_probs,
                           _draft_prob_req_ids=None if draft_probs is None else list(batch.req_ids))
    view._get_cumsum_and_arange = GPUModelRunner._get_cumsum_and_arange.__get__(view)
    return view, GPUModelRunner


def rejection_sampler():
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler

    return RejectionSampler(Sampler())
