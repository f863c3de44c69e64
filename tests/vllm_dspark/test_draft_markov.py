"""DSpark's Markov block sampling in vLLM's V2 speculator (`DSparkSpeculator._sample_sequential` -> `gumbel_sample`),
through the pack's `markov_draft` (a weights-free draft model; substitutes in contracts/adapters/vllm_dspark/draft.py),
against independent oracles:

* the law each draft was drawn from is what the speculator leaves for the verifier: its draft logits cache holds
  exactly base + bias[previous token] at that step (pre-temperature; the rejection sampler divides by T), where the
  previous token is the anchor for the first draft and the block's own previous draft after it;
* greedy drafts (T = 0) are that law's argmax;
* sampled drafts follow softmax(law / T): the frequencies of the first draft, and of the second given the first, over
  many requests with distinct seeds, are within a total-variation bound of the law (derandomized: fixed seeds).
"""

import pytest
import torch

V, N = 4, 2


def _case(bs, temperature, seed=0):
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(N, V, generator=gen).to(torch.float32).expand(bs, N, V).contiguous()
    bias = (2 * torch.randn(V, V, generator=gen)).to(torch.float32)
    anchors = torch.full((bs,), 1, dtype=torch.int64)
    temps = torch.full((bs,), float(temperature))
    seeds = torch.arange(bs, dtype=torch.int64) * 7919 + 17
    positions = torch.full((bs,), 9, dtype=torch.int64)
    return base, bias, anchors, temps, seeds, positions


def _check_cache_and_prefix(base, bias, anchors, drafts, cached):
    prev = anchors.clone()
    for i in range(N):
        law = base[:, i] + bias[prev]
        assert torch.equal(cached[:, i], law), f"step {i}: cached logits are not base + bias[previous token]"
        assert bool(((drafts[:, i] >= 0) & (drafts[:, i] < V)).all())
        prev = drafts[:, i]


def test_greedy_drafts_are_the_markov_argmax(vllm_dspark_engine):
    base, bias, anchors, temps, seeds, positions = _case(6, 0.0, seed=3)
    base = base + torch.randn(base.shape, generator=torch.Generator().manual_seed(4))  # rows differ per request
    drafts, cached = vllm_dspark_engine.markov_draft(base, bias, anchors, temps, seeds, positions)
    _check_cache_and_prefix(base, bias, anchors, drafts, cached)
    prev = anchors
    for i in range(N):
        assert torch.equal(drafts[:, i], (base[:, i] + bias[prev]).argmax(-1))
        prev = drafts[:, i]


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_sampled_drafts_follow_the_cached_law(vllm_dspark_engine, temperature):
    bs = 600
    base, bias, anchors, temps, seeds, positions = _case(bs, temperature, seed=5)
    drafts, cached = vllm_dspark_engine.markov_draft(base, bias, anchors, temps, seeds, positions)
    _check_cache_and_prefix(base, bias, anchors, drafts, cached)
    # First draft: one law for every request. TV of 600 draws over 4 tokens: about 0.03 typical; bound 0.08.
    law0 = torch.softmax((base[0, 0] + bias[1]).double() / temperature, -1)
    freq0 = torch.bincount(drafts[:, 0], minlength=V).double() / bs
    assert 0.5 * (freq0 - law0).abs().sum() < 0.08, (freq0, law0)
    # Second draft given the first: the law after that first draft (groups of >= 100 draws; bound 0.15).
    for prev in range(V):
        rows = drafts[:, 0] == prev
        if int(rows.sum()) < 100:
            continue
        law1 = torch.softmax((base[0, 1] + bias[prev]).double() / temperature, -1)
        freq1 = torch.bincount(drafts[rows, 1], minlength=V).double() / int(rows.sum())
        assert 0.5 * (freq1 - law1).abs().sum() < 0.15, (prev, freq1, law1)


def test_a_draft_drawn_without_its_temperature_is_caught(vllm_dspark_engine):
    """Negative control: `_sample_logits` calling gumbel_sample with apply_temperature=False draws at T = 1 while the
    cache (and so the verifier) says T: the frequency oracle above fails."""
    from vllm.v1.worker.gpu.spec_decode.dspark import speculator

    real = speculator.gumbel_sample

    def no_temperature(*args, **kwargs):
        return real(*args, **{**kwargs, "apply_temperature": False})

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(speculator, "gumbel_sample", no_temperature)
        with pytest.raises(AssertionError):
            test_sampled_drafts_follow_the_cached_law(vllm_dspark_engine, 0.5)
