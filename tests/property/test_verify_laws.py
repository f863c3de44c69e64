"""The engine-derived law machinery behind LOSSLESS-001/002 (contracts/scenarios/verify.py).

It must reproduce the exact float64 law on a correct engine, and refuse an
engine whose randomness is not used the documented way instead of
integrating something meaningless.
"""

import pytest
import torch

from contracts import oracle
from contracts.adapters.reference import ReferenceAdapter
from contracts.boundary.verify import AcceptResult
from contracts.scenarios.verify import derived_block_law, markov_enumeration
from contracts.strategies.verify import family_rows
from contracts.violation import Mismatch


def _toy(seed=3, v=3):
    gen = torch.Generator().manual_seed(seed)
    return family_rows(gen, "dense", v, v), family_rows(gen, "sparse", v, v)


@pytest.mark.parametrize("verify_len", [None, 1, 2])
@pytest.mark.parametrize("one_hot", [False, True])
def test_derived_law_is_the_exact_law_on_the_reference(verify_len, one_hot):
    target, draft = _toy()
    if one_hot:
        draft = torch.eye(3, dtype=torch.float64).roll(1, 0)
    gamma, anchor = 2, 1
    e = markov_enumeration(target, draft, anchor, gamma, one_hot=one_hot, verify_len=verify_len)
    derived = derived_block_law(ReferenceAdapter(), e)[0]
    exact = oracle.emitted_block_law(oracle.markov(target), oracle.markov(draft), gamma, prefix=(anchor,),
                                     verify_len=verify_len)
    assert oracle.total_variation(derived, exact) < 1e-10


class _InverseCdfResampler(ReferenceAdapter):
    """Accepts like the reference but resamples by inverse CDF on a uniform taken from the noise."""

    def sampling_accept(self, inputs):
        out = super().sampling_accept(inputs)
        u = (inputs.resample_noise[:, 0] % 1.0)[:, None]
        cdf = inputs.target_probs[:, 0].cumsum(-1)
        drawn = (cdf > u).to(torch.int64).argmax(-1)
        rejected = out.correct_len.to(torch.int64) == 0
        return AcceptResult(out.correct_len, torch.where(rejected, drawn, out.bonus), out.cap_trim)


class _NoisyPrefix(ReferenceAdapter):
    """Lets the resample noise move the accept decision (coins ignored at position 0)."""

    def sampling_accept(self, inputs):
        coins = inputs.coins.clone()
        coins[:, 0] = (inputs.resample_noise[:, 0] > 1.5).to(coins.dtype) * 0.999
        return super().sampling_accept(inputs.replace(coins=coins))


@pytest.mark.parametrize("engine", [_InverseCdfResampler(), _NoisyPrefix()], ids=["inverse-cdf", "noise-moves-prefix"])
def test_an_engine_off_the_interface_cannot_pass(engine):
    """Either the machinery refuses the engine outright, or the law it measures is visibly not the exact one."""
    target, draft = _toy()
    gamma, anchor = 2, 0
    e = markov_enumeration(target, draft, anchor, gamma, one_hot=False)
    try:
        derived = derived_block_law(engine, e)[0]
    except Mismatch:
        return
    exact = oracle.emitted_block_law(oracle.markov(target), oracle.markov(draft), gamma, prefix=(anchor,))
    assert oracle.total_variation(derived, exact) > 0.01


def test_noise_that_moves_the_prefix_is_refused():
    target, draft = _toy()
    with pytest.raises(Mismatch, match="accepted prefix does not move"):
        derived_block_law(_NoisyPrefix(), markov_enumeration(target, draft, 0, 2, one_hot=False))


@pytest.mark.parametrize("probs, top_k, top_p, want", [
    ([0.5, 0.3, 0.2], 0, 1.0, [0.5, 0.3, 0.2]),
    ([0.5, 0.3, 0.2], 2, 1.0, [0.625, 0.375, 0.0]),
    ([0.2, 0.5, 0.3], 0, 0.6, [0.0, 0.625, 0.375]),  # 0.3 crosses 0.6: kept
    ([0.5, 0.3, 0.2], 0, 0.45, [1.0, 0.0, 0.0]),  # 0.5 alone passes 0.45: the run stops there
    ([0.4, 0.2, 0.4], 1, 1.0, [0.5, 0.0, 0.5]),  # a tie at the k-th place keeps both
    ([0.4, 0.4, 0.2], 0, 0.3, [0.5, 0.5, 0.0]),  # a tie at the top-p cut keeps both
    ([0.5, 0.3, 0.2], 2, 0.6, [1.0, 0.0, 0.0]),  # top-p reads the law top-k renormalised (0.625 >= 0.6)
])
def test_the_oracle_sampling_law_by_hand(probs, top_k, top_p, want):
    """Worked by hand from the definitions, so the oracle behind LOOP-006, VERIFY-011 and DIST-001 is checked
    against something other than an engine."""
    logits = torch.tensor(probs, dtype=torch.float64).log()
    got = oracle.sampling_law(logits, 1.0, top_k, top_p)
    assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), atol=1e-12), got.tolist()
    hot = oracle.sampling_law(logits * 2, 2.0, top_k, top_p)  # temperature divides the logits
    assert torch.allclose(hot, got, atol=1e-12)
