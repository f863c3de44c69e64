"""Verify level on vLLM: one speculative step through V1's `RejectionSampler`, as `GPUModelRunner._sample` runs it.

Inputs (see `contracts.adapters.vllm.runtime`): one request per row with its own `SamplingParams` (greedy rows at
temperature 0; sampled rows at the case's temperature, top-k and top-p, seeded), so the randomness is vLLM's own:
the per-request generators draw the accept coins (`generate_uniform_probs`), the recovered-token noise
(`sample_recovered_tokens`) and the bonus token (the `Sampler`). A row's verify length L is how many tokens the
scheduler scheduled for it: the anchor and L-1 drafts (`num_draft_tokens = L - 1`; vLLM never sees the drafts past
it, so its `cap_trim` is 0 and the adapter does not declare verify.cap-trim). Draft probabilities are the drafter's
cached `_draft_probs`; a one-hot draft (`draft_probs=None`) is the n-gram path (no draft probabilities). Target logits
go in as float32, the dtype of vLLM's logits.

Outputs: `sampled_token_ids` [bs, max_spec_len + 1] with vLLM's -1 placeholders, read by
`RejectionSampler.parse_output` (accepted drafts and the recovered or bonus token). `finalize` reads that same
output (it only accepts results of this adapter's own accept calls) and pads the row to gamma+1 with -1; the
new sequence length is the scheduler's rollback of `Scheduler.update_from_output` (num_computed_tokens advanced
by the scheduled 1 + n tokens, minus the rejected n - accepted), done by the adapter (hides: a bug in that
rollback).

Beyond the boundary (pack extensions, tests/vllm/test_mixed_steps.py): `mixed_block` verifies greedy and sampled
requests in one batch (greedy_mask), and `consecutive_blocks` verifies the same requests over consecutive steps in one
persistent InputBatch, so each seeded request's generator carries on as the model runner keeps it.
"""

from __future__ import annotations

import numpy as np
import torch

from contracts.adapters.vllm import runtime
from contracts.boundary.verify import AcceptDistributions, AcceptResult, CommitResult, VerifyInputs
from contracts.patching import patched


def _settings(inputs: VerifyInputs, greedy):
    """Per row (temperature, top_k, top_p): `greedy` True (all rows greedy), False (none) or a [bs] bool mask."""
    if greedy is True:
        return [(0.0, 0, 1.0)] * inputs.bs
    if greedy is False:
        return inputs.sampling_settings()
    return [(0.0, 0, 1.0) if bool(g) else s for g, s in zip(greedy.tolist(), inputs.sampling_settings())]


class _Recording:
    """A kernel launcher that records its arguments, then launches; every other attribute is the real one's."""

    def __init__(self, real, record):
        self._real, self._record = real, record

    def __call__(self, *args, **kwargs):
        self._record(*args, **kwargs)
        return self._real(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._real, name)


class VLLMVerify:
    _KEEP = 16  # recent accept results whose vLLM output finalize can read

    def _remember(self, accept, record):
        outputs = self.__dict__.setdefault("_outputs", {})
        outputs[id(accept)] = (accept, record)
        while len(outputs) > self._KEEP:
            outputs.pop(next(iter(outputs)))

    def _step(self, inputs: VerifyInputs, *, greedy, seed: int = 0, capped: bool = True, batch=None):
        """One RejectionSampler call; returns vLLM's sampled_token_ids and the drafts scheduled per row. `batch`: an
        InputBatch of earlier steps of the same requests (its per-request generators carried on, as the model runner
        keeps them in its persistent batch); None: a new one."""
        runtime.prepare()
        bs, width = inputs.candidates.shape
        gamma, vocab = width - 1, inputs.vocab
        if bs == 0:
            raise ValueError("candidates: vLLM's rejection sampler needs at least one request (bs == 0)")
        lens = inputs.lens() if capped else torch.full((bs,), width, dtype=torch.int64)
        n = (lens - 1).numpy().astype(np.int32)
        cand = inputs.candidates.to(torch.int64)
        if batch is None:
            batch = runtime.input_batch(_settings(inputs, greedy), cand[:, 0].tolist(), gamma, vocab, seed)
        elif batch.num_reqs != bs:
            raise ValueError(f"inputs: a later step of the same requests needs {batch.num_reqs} rows, got {bs}")
        scheduled = torch.cat([cand[i, : n[i] + 1] for i in range(bs)]).to(torch.int32)  # anchor + drafts per request
        q = None if inputs.draft_probs is None else inputs.draft_probs.to(torch.float32).contiguous()
        view, runner = runtime.runner_view(batch, scheduled, q)
        logits = torch.cat([inputs.target_logits[i, : n[i] + 1] for i in range(bs)]).to(torch.float32)
        sampler = runtime.rejection_sampler()
        if n.any():  # GPUModelRunner._prepare_inputs: spec metadata only when some request has drafts scheduled
            metadata = runner._calc_spec_decode_metadata(view, n, np.cumsum(n + 1))
            draft_probs = runner._get_spec_decode_draft_probs(view, metadata)
            out = sampler(metadata, draft_probs, logits, batch.sampling_metadata)
        else:  # no request has a draft scheduled: the runner builds no spec metadata, the Sampler samples
            out = sampler.sampler(logits=logits, sampling_metadata=batch.sampling_metadata)
        return out.sampled_token_ids.clone(), n

    def _accept(self, inputs: VerifyInputs, *, greedy, seed: int = 0, batch=None) -> AcceptResult:
        from vllm.v1.sample.rejection_sampler import RejectionSampler

        sampled, n = self._step(inputs, greedy=greedy, seed=seed, batch=batch)
        emitted, _ = RejectionSampler.parse_output(sampled, inputs.vocab)
        correct = torch.tensor([len(row) - 1 for row in emitted], dtype=torch.int64)
        bonus = torch.tensor([row[-1] if row else -1 for row in emitted], dtype=torch.int64)
        accept = AcceptResult(correct, bonus, torch.zeros_like(correct))
        self._remember(accept, (sampled, n, emitted))
        return accept

    def greedy_accept(self, inputs: VerifyInputs) -> AcceptResult:
        return self._accept(inputs, greedy=True)

    def sample_block(self, inputs: VerifyInputs, seed: int) -> AcceptResult:
        """Sampled rows with vLLM's own randomness: each request seeded from (seed, row)."""
        return self._accept(inputs, greedy=False, seed=seed)

    def mixed_block(self, inputs: VerifyInputs, seed: int) -> AcceptResult:
        """verify.mixed-batches: greedy rows (greedy_mask, temperature 0) and sampled rows in one batch, as vLLM
        batches them (VERIFY-013, 014, 016)."""
        return self._accept(inputs, greedy=inputs.greedy_mask.to(torch.bool), seed=seed)

    def consecutive_blocks(self, steps, seed: int) -> list:
        """verify.mixed-batches: the same requests verified over consecutive steps, one `VerifyInputs` per step (same bs;
        greedy_mask and sampling settings from the first), in ONE persistent InputBatch, so each seeded request's
        generator carries on from step to step as in the model runner. Returns one AcceptResult per step."""
        steps = list(steps)
        if not steps:
            raise ValueError("steps: expected at least one VerifyInputs")
        first = steps[0]
        runtime.prepare()
        cand = first.candidates.to(torch.int64)
        batch = runtime.input_batch(_settings(first, first.greedy_mask.to(torch.bool)), cand[:, 0].tolist(),
                                    first.gamma, first.vocab, seed)
        return [self._accept(inputs, greedy=None, seed=seed, batch=batch) for inputs in steps]

    def finalize(self, inputs: VerifyInputs, accept: AcceptResult) -> CommitResult:
        found = self.__dict__.get("_outputs", {}).get(id(accept))
        if found is None or found[0] is not accept:
            raise ValueError("accept: finalize on vLLM reads the rejection sampler's own output, so it takes only a "
                             "result of this adapter's greedy_accept or sample_block")
        sampled, n, emitted = found[1]
        bs, width = inputs.candidates.shape
        commit = torch.tensor([len(row) for row in emitted], dtype=torch.int64)
        rejected = torch.as_tensor(n, dtype=torch.int64) - (commit - 1)
        # Scheduler.update_from_output: num_computed_tokens (prefix + the 1 + n scheduled) -= num_rejected.
        new_seq_lens = inputs.prefix_lens.to(torch.int64) + 1 + torch.as_tensor(n, dtype=torch.int64) - rejected
        out = torch.full((bs, width), -1, dtype=torch.int64)
        out[:, : sampled.shape[1]] = sampled.to(torch.int64)
        return CommitResult(commit, new_seq_lens, out)

    def accept_distributions(self, inputs: VerifyInputs) -> AcceptDistributions:
        """The laws vLLM's sampled accept reads: the target probabilities and draft probabilities its random
        rejection kernel is handed (all gamma drafts scheduled), and for the bonus row the softmax of the logits
        the Sampler's Gumbel-argmax reads (after its temperature and top-k/top-p)."""
        runtime.prepare()
        from vllm.v1.sample import rejection_sampler as rs
        from vllm.v1.sample.ops import topk_topp_sampler as tks

        seen = {}
        real_random, real_cut = rs._rejection_random_sample, tks.apply_top_k_top_p

        def record_kernel_inputs(*args, **kwargs):
            seen.update(draft=args[3], target=args[4].clone())

        def recording_cut(logits, k, p):
            cut = real_cut(logits, k, p)
            seen["bonus"] = cut.to(torch.float32).softmax(-1)
            return cut

        with patched(rs, "_rejection_random_sample", _Recording(real_random, record_kernel_inputs)), \
                patched(tks, "apply_top_k_top_p", recording_cut):
            self._step(inputs, greedy=False, seed=0, capped=False)
        bs, gamma, vocab = inputs.bs, inputs.gamma, inputs.vocab
        target = torch.cat([seen["target"].reshape(bs, gamma, vocab), seen["bonus"].reshape(bs, 1, vocab)], 1)
        draft = None if seen["draft"] is None else seen["draft"].reshape(bs, gamma, vocab).clone()
        return AcceptDistributions(target, draft)
