"""DSpark's Markov block sampling on vLLM's V2 speculator (vllm 0.33.0): `DSparkSpeculator._sample_sequential`, the
loop that turns the backbone's per-position draft logits into a block of drafts, one position at a time, each with
a Markov bias from the previously sampled token, through `gumbel_sample` (Triton, interpreted here), writing the
pre-temperature logits it sampled from into the draft logits cache that the rejection sampler reads as q.

The draft.markov-block level (DRAFT-004): the logits left for draft k are base_k + bias[previous token] (the anchor,
then the block's own drafts), greedy drafts are their argmax, and sampled drafts follow softmax(logits / T) (a
randomized PIT gate). The logits returned are the cache the V2 rejection sampler reads, pre-temperature (its kernels
apply 1/T: "draft_logits is stored pre-temperature" in rejection_sampler_utils.py).

Substituted (what each can hide):
* the speculator object: `DSparkSpeculator.__new__` plus the attributes `_sample_sequential` and `_sample_logits`
  read, set by the adapter (its constructor needs a draft model's HF config and a loaded target model). Hides: a bug in
  the constructor's buffer set-up (`sample_from_anchor`, `num_query_per_req`, buffer sizes).
* the draft model: weights-free. `compute_draft_logits(h)` returns h (the adapter passes the case's base logits as the
  hidden states), `markov_embed(prev)` is the one-hot row of `prev`, `markov_bias(e)` is `e @ bias` (the case's
  [V, V] bias table), `map_draft_to_target` the identity. Hides: the real DSpark head's arithmetic (a bias applied with
  the wrong sign or scale inside the model), a reduced draft vocabulary (`_d2t_scatter_index`), the top-k head.
* positions and slots: `sample_pos` (the predicted token's position: the anchor's position + 1 + step, as
  `_prepare_dflash_inputs_kernel` computes it with `sample_from_anchor`) and the request slots are the adapter's; the
  backbone forward (`_run_model`) does not run. Hides: a bug in `_prepare_dflash_inputs_kernel` or the backbone.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from contracts.boundary.draft import markov_shapes


class _WeightsFreeDSparkModel:
    """The draft model methods `_sample_sequential` calls, with no weights: logits = hidden, bias = table[prev]."""

    def __init__(self, bias: torch.Tensor):
        self.bias = bias

    def compute_draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden

    def markov_embed(self, prev: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(prev.to(torch.int64), self.bias.shape[0]).to(self.bias.dtype)

    def markov_bias(self, embed: torch.Tensor) -> torch.Tensor:
        return embed @ self.bias

    def map_draft_to_target(self, ids: torch.Tensor) -> torch.Tensor:
        return ids


class VLLMDSparkMarkovDraft:
    def markov_draft(self, base_logits: torch.Tensor, bias: torch.Tensor, anchors, temperatures, seeds, positions):
        """One DSpark draft block per request through `DSparkSpeculator._sample_sequential`.

        base_logits [bs, n, V] float32: the backbone's draft logits per position; bias [V, V] float32: the Markov bias
        after each token; anchors, temperatures, seeds, positions: per request (position = the anchor's). Returns
        (drafts [bs, n] int64, cached [bs, n, V] float32: what the speculator left in its draft logits cache)."""
        from contracts.adapters.vllm_dspark import env

        env.prepare_vllm_dspark_import()
        from vllm.v1.worker.gpu.spec_decode.dspark.speculator import DSparkSpeculator

        bs, n, vocab = markov_shapes(base_logits, bias)
        columns = [torch.as_tensor(x) for x in (anchors, temperatures, seeds, positions)]
        if any(c.shape != (bs,) for c in columns):
            raise ValueError(f"anchors, temperatures, seeds, positions: expected [{bs}] each, got "
                             f"{[tuple(c.shape) for c in columns]}")
        anchors, temperatures, seeds, positions = columns
        max_reqs = bs + 1
        slots = torch.arange(bs, 0, -1, dtype=torch.int32)  # slot bs - r for row r: not the identity
        spec = DSparkSpeculator.__new__(DSparkSpeculator)
        temperature = torch.zeros(max_reqs, dtype=torch.float32)
        temperature[slots.long()] = temperatures.to(torch.float32)
        seed_buf = torch.zeros(max_reqs, dtype=torch.int64)
        seed_buf[slots.long()] = seeds.to(torch.int64)
        input_ids = torch.zeros(max_reqs * n, dtype=torch.int32)
        input_ids[torch.arange(bs) * n] = anchors.to(torch.int32)  # each request's query block starts at its anchor
        sample_pos = (positions.to(torch.int64)[:, None] + 1 + torch.arange(n)[None, :]).reshape(-1)
        spec.__dict__.update(
            _draft_topk=None, model=_WeightsFreeDSparkModel(bias.to(torch.float32)), num_speculative_steps=n,
            sample_indices=torch.arange(bs * n), sample_idx_mapping=slots.repeat_interleave(n),
            sample_pos=sample_pos, input_buffers=SimpleNamespace(input_ids=input_ids),
            _anchor_idx=torch.arange(max_reqs, dtype=torch.int64) * n, use_confidence_head=False,
            acceptance_estimator=None, draft_logits=torch.zeros(max_reqs, n, vocab, dtype=torch.float32),
            draft_watermarker=None, temperature=temperature, seeds=seed_buf,
            _step_cols=torch.arange(n, dtype=torch.int32), _d2t_scatter_index=None, use_fp64_gumbel=False,
            draft_tokens=torch.full((max_reqs, n), -1, dtype=torch.int64))
        head_hidden = base_logits.to(torch.float32).reshape(bs * n, vocab).contiguous()
        spec._sample_sequential(bs, head_hidden)
        drafts = spec.draft_tokens[:bs].to(torch.int64).clone()
        cached = spec.draft_logits[slots.long()].clone()
        return drafts, cached
