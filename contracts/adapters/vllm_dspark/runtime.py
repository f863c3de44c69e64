"""vLLM's own V2 model-runner objects for one verify step, built through vLLM's constructors (vllm 0.33.0, CPU).

What is real: `RequestState` (the runner's persistent request slots: `add_request` picks the slot, so the batch's
`idx_mapping` is vLLM's own, not the identity), `Sampler` (built from a `VllmConfig`, with its `SamplingStates`:
temperature, top-k, top-p and per-request seeds from each request's `SamplingParams`), `RejectionSampler` (its own
constructor; its `__call__` is what `GPUModelRunner.sample` calls: `gather_draft_sampled`, the sampler's
`apply_sampling_params`, `rejection_sample`, `get_num_sampled_and_rejected`) and `expand_idx_mapping` (the runner's
`cu_num_logits` expansion). Every kernel is vLLM's Triton kernel, run in Triton's interpreter (see `env`).

Substituted (what each can hide):
* the `InputBatch`: a namespace holding the fields `RejectionSampler.__call__` reads (input ids, positions,
  logits_indices, idx_mapping and its expansion, cu_num_logits, seq_lens), filled as `InputBatch.make_dummy` and
  `prepare_inputs` lay them out for a speculative step: each request schedules its anchor and its drafts, every
  scheduled token has a logits row. Hides: a bug in how the runner fills those (combine_sampled_and_draft_tokens,
  the block tables).
* the `SpeculativeConfig`: a namespace with the fields `RejectionSampler.__init__` reads (num_speculative_tokens,
  rejection_sample_method "standard" or "block", adaptive verification off, no synthetic rates, no FLy window);
  a real one needs a draft model's HF config. Hides: a config post-init that changes those fields.
* the `VllmConfig` has `device_config` "cpu" (device inference fails without CUDA) and defaults elsewhere: no
  penalties, logit bias, bad words, reasoning budget or watermark, so those logits processors are inactive.
  Hides: their interaction with verification.
* the draft logits cache: `DSparkSpeculator` stores each draft step's pre-temperature logits in
  `draft_logits[slot, step]`, and the rejection kernels divide by the request's temperature. The adapter writes
  `T * log(q)` there, so the law the kernels read is exactly the case's draft law q (float32 rounding aside).
  Hides: nothing of verification; the draft level checks what the speculator itself writes there.
* each request's prompt is one token at position 0 and its anchor sits at position 1 + prefix_len, so the step never
  starts inside the prefill (where `gather_draft_sampled` turns drafts into -1 placeholders on purpose).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

_CACHE: dict = {}  # the VllmConfig (seconds to build) and the imported names, built once per process


def prepare():
    """Import vLLM (interpreter mode) once; return a namespace of the V2 names the adapter uses."""
    if "names" in _CACHE:
        return _CACHE["names"]
    from contracts.adapters.vllm_dspark import env

    env.prepare_vllm_dspark_import()
    from vllm.config import DeviceConfig, VllmConfig
    from vllm.sampling_params import SamplingParams
    from vllm.v1.worker.gpu import input_batch
    from vllm.v1.worker.gpu.sample.sampler import Sampler
    from vllm.v1.worker.gpu.spec_decode import rejection_sampler, rejection_sampler_utils
    from vllm.v1.worker.gpu.states import RequestState

    names = SimpleNamespace(VllmConfig=VllmConfig, DeviceConfig=DeviceConfig, SamplingParams=SamplingParams,
                            input_batch=input_batch, Sampler=Sampler, rejection_sampler=rejection_sampler,
                            rejection_sampler_utils=rejection_sampler_utils, RequestState=RequestState)
    _CACHE["config"] = VllmConfig(device_config=DeviceConfig(device="cpu"))
    _CACHE["names"] = names
    return names


def request_seed(seed: int, row: int) -> int:
    """Per-request seed from the call's seed and the row: distinct per row, a function of (seed, row) only."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__}")
    return (int(seed) * 0x9E3779B97F4A7C15 + row * 0xBF58476D1CE4E5B9 + 1) % (2**62)


def sampling_params(names, setting, seed: int):
    """`SamplingParams` as a user sets them: temperature 0 is greedy; top_k 0 (the boundary's off) is vLLM's -1."""
    temperature, top_k, top_p = setting
    return names.SamplingParams(temperature=float(temperature), top_k=int(top_k) if top_k > 0 else -1,
                                top_p=float(top_p), seed=seed)


class Step:
    """One verify step's vLLM objects: a request state, a sampler and a rejection sampler for `bs` requests."""

    def __init__(self, names, *, bs: int, gamma: int, vocab: int, method: str):
        if method not in ("standard", "block"):
            raise ValueError(f"method: expected 'standard' or 'block', got {method!r}")
        dev = torch.device("cpu")
        self.names, self.gamma, self.vocab = names, gamma, vocab
        self.max_num_reqs = bs + 1  # one slot more than the batch, so a slot past the batch stays unused
        self.req_states = names.RequestState(max_num_reqs=self.max_num_reqs, max_model_len=gamma + 64 + 2**16,
                                             max_num_batched_tokens=self.max_num_reqs * (gamma + 1),
                                             num_speculative_steps=gamma, vocab_size=vocab, device=dev)
        self.sampler = names.Sampler(_CACHE["config"], self.max_num_reqs, vocab, dev, self.req_states,
                                     num_speculative_tokens=gamma + 1)
        self.spec = spec = SimpleNamespace(num_speculative_tokens=gamma, enable_adaptive_verification=False,
                                           rejection_sample_method=method, fly_entropy_threshold=0.3,
                                           fly_entropy_top_k=3, synthetic_acceptance_rates=None, fly_window_size=None)
        self.rejection_sampler = names.rejection_sampler.RejectionSampler(self.sampler, spec, dev)
        self.slots: list = []

    def add_requests(self, anchors, settings, seeds, prefix_lens) -> None:
        """GPUModelRunner.add_requests: one request per row, its prompt one token, `prefix_len` tokens computed after
        it; the slot is RequestState's choice."""
        for row, (anchor, setting, seed, prefix) in enumerate(zip(anchors, settings, seeds, prefix_lens)):
            req_id = f"req-{row}"
            self.req_states.add_request(req_id, prompt_len=1, all_token_ids=[int(anchor)],
                                        num_computed_tokens=1 + int(prefix), max_tokens=2**16)
            slot = self.req_states.req_id_to_index[req_id]
            self.sampler.add_request(slot, sampling_params(self.names, setting, seed))
            self.slots.append(slot)
        self.req_states.apply_staged_writes()
        self.sampler.apply_staged_writes()

    def input_batch(self, scheduled, prefix_lens):
        """The InputBatch fields RejectionSampler reads, for rows scheduling `scheduled[i]` tokens (anchor + drafts)."""
        num_logits = np.array([len(s) for s in scheduled], dtype=np.int32)
        cu_np = np.concatenate([[0], np.cumsum(num_logits)]).astype(np.int32)
        cu = torch.from_numpy(cu_np.copy())
        idx_mapping = torch.tensor(self.slots, dtype=torch.int32)
        total = int(cu_np[-1])
        expanded_idx_mapping, expanded_local_pos = self.names.input_batch.expand_idx_mapping(
            idx_mapping, total, cu, int(num_logits.max()))
        input_ids = torch.tensor([t for s in scheduled for t in s], dtype=torch.int32)
        positions = torch.cat([1 + int(p) + torch.arange(len(s), dtype=torch.int64)
                               for s, p in zip(scheduled, prefix_lens)])
        seq_lens = torch.tensor([1 + int(p) + len(s) for s, p in zip(scheduled, prefix_lens)], dtype=torch.int32)
        return SimpleNamespace(
            input_ids=input_ids, positions=positions, logits_indices=torch.arange(total, dtype=torch.int64),
            expanded_idx_mapping=expanded_idx_mapping, expanded_local_pos=expanded_local_pos, cu_num_logits=cu,
            cu_num_logits_np=cu_np, idx_mapping=idx_mapping, idx_mapping_np=idx_mapping.numpy().copy(),
            num_reqs=len(scheduled), num_draft_tokens=int(total - len(scheduled)), seq_lens=seq_lens,
            seq_lens_cpu_upper_bound=seq_lens.clone())

    def draft_logits_cache(self, draft_probs, temperatures):
        """The speculator's draft logits cache [max_num_reqs, gamma, V] (pre-temperature), holding T * log(q) per
        request slot and draft step, so the kernels' softmax(cache / T) is q; greedy rows (T = 0) hold log(q)."""
        cache = torch.zeros(self.max_num_reqs, self.gamma, self.vocab, dtype=torch.float32)
        for row, slot in enumerate(self.slots):
            t = float(temperatures[row]) if float(temperatures[row]) > 0 else 1.0
            cache[slot] = (t * torch.log(draft_probs[row].to(torch.float64))).to(torch.float32)
        return cache
