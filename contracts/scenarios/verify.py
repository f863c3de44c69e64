"""One verify step end to end, and exact laws measured from an engine's own decisions.

`derived_block_law` is what makes the exact losslessness contracts
engine-agnostic: it never evaluates the accept rule or the residual itself.
It asks the engine (through injected coins and resample noise) and integrates:

1. Coins. For each enumerated draft sequence and each position ``k``, the
   engine's accept threshold ``tau_k`` is found by a k-ary search on the coin
   ``u_k`` (earlier coins 0, so earlier drafts pass whenever they can). The
   accept event is assumed to be an interval ``[0, tau_k)`` of the coin, which
   a chain sampler satisfies; the contracts check the exact decision at chosen
   coins separately (VERIFY-005). Then ``P(raw = n) = prod_{j<n} tau_j * (1 - tau_n)``.
2. Noise. Inside each region (at coins the engine was seen to accept /
   reject in step 1) the emitted block is read back. Its last token is the
   bonus, which under the injected-noise interface is an exponential race
   ``argmax_x r(x) * w(x)`` over weights ``r`` the engine chooses. The weights
   are measured up to scale: ``x0`` = the engine's pick under flat noise; for
   each other ``y``, noise 1 on ``x0``, ``2**t`` on ``y`` and ``2**-200``
   elsewhere, with ``t`` searched, gives ``r(y) / r(x0)``. The bonus law is the
   normalised ratio vector. A pick outside ``{x0, y}`` or an emitted prefix that
   moves with the noise is reported: then the engine is not a chain sampler
   over the documented randomness.

Precision: coin thresholds to 2**-36, weight ratios to a relative ~1e-10,
ratios below 2**-48 read as 0; laws agree with exact ones to ~1e-9.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Optional

import hypothesis
import torch

from contracts.boundary.verify import VerifyInputs, VerifyResult
from contracts.checks import expect
from contracts.protocol import VERIFY_EMPTY_BATCH

SEARCH_POINTS = 15  # probes per row per engine call: 4 bits per call
COIN_BITS = 36
RATIO_BITS = 42  # over a log2 range of 48: ratios to a relative ~1e-11
RATIO_LOG2_RANGE = 48.0
FLOOR_NOISE = 2.0 ** -200
MAX_COIN = 1.0 - 2.0 ** -53  # the largest float64 coin below 1


def require_supported(engine, inputs: VerifyInputs) -> None:
    """An empty batch (a DP-idle rank) goes only to engines that declare `verify.empty-batch`;
    for the others such an example is discarded, not failed."""
    if inputs.bs == 0 and VERIFY_EMPTY_BATCH not in engine.capabilities:
        hypothesis.reject()


def verify_step(engine, inputs: VerifyInputs, mode: str, seed: int = 0) -> VerifyResult:
    """accept (greedy | sampling | mixed | block = engine's own randomness) then finalize."""
    require_supported(engine, inputs)
    if mode == "greedy":
        accept = engine.greedy_accept(inputs)
    elif mode == "sampling":
        accept = engine.sampling_accept(inputs)
    elif mode == "mixed":
        accept = engine.mixed_accept(inputs)
    elif mode == "block":
        accept = engine.sample_block(inputs, seed)
    else:
        raise ValueError(f"mode: unknown verify mode {mode!r}")
    return VerifyResult(accept, engine.finalize(inputs, accept))


@dataclass(frozen=True)
class Enumeration:
    """Draft sequences to integrate over, one verify row each (float64 probabilities)."""

    candidates: torch.Tensor  # [M, gamma+1] int64
    target_probs: torch.Tensor  # [M, gamma+1, V]
    draft_probs: Optional[torch.Tensor]  # [M, gamma, V] or None (one-hot on the candidates)
    weight: torch.Tensor  # [M] float64: probability of this draft sequence (sums to 1 per group)
    group: torch.Tensor  # [M] int64: which law the row belongs to
    verify_lens: Optional[torch.Tensor] = None  # [M]

    @property
    def m(self) -> int:
        return self.candidates.shape[0]


def _inputs(e: Enumeration, index: torch.Tensor, coins: torch.Tensor, noise: torch.Tensor) -> VerifyInputs:
    n = index.numel()
    p = e.target_probs[index]
    return VerifyInputs(
        candidates=e.candidates[index], target_logits=p.log(), target_probs=p,  # softmax(logits) is p
        draft_probs=None if e.draft_probs is None else e.draft_probs[index],
        coins=coins, resample_noise=noise,
        verify_lens=None if e.verify_lens is None else e.verify_lens[index],
        greedy_mask=torch.zeros(n, dtype=torch.bool), prefix_lens=torch.zeros(n, dtype=torch.int64))


def _raw(engine, inputs: VerifyInputs) -> torch.Tensor:
    out = engine.sampling_accept(inputs)
    return out.correct_len.to(torch.int64) + out.cap_trim.to(torch.int64)


def _search(pred, lo: torch.Tensor, hi: torch.Tensor, bits: int, k: int = SEARCH_POINTS):
    """Vectorised k-ary search for each row's switch point of a monotone predicate.

    ``pred(points [n, j]) -> bool [n, j]`` is False below the switch and True above. Each
    round tests ``k`` interior points per row in one call, gaining log2(k+1) bits.
    Returns the final (lo, hi) bracket.
    """
    steps = torch.arange(1, k + 1, dtype=torch.float64)[None, :] / (k + 1)
    for _ in range(math.ceil(bits / math.log2(k + 1))):
        pts = lo[:, None] + (hi - lo)[:, None] * steps
        first = torch.where(pred(pts), torch.arange(k)[None, :], k).amin(1)
        new_hi = torch.where(first < k, pts.gather(1, first.clamp(max=k - 1)[:, None])[:, 0], hi)
        lo = torch.where(first > 0, pts.gather(1, (first - 1).clamp(min=0)[:, None])[:, 0], lo)
        hi = new_hi
    return lo, hi


def coin_thresholds(engine, e: Enumeration):
    """tau [M, gamma]: the measure of coins accepting draft k (earlier drafts passed at coin 0), by search
    on the coin; with, for each (row, k), a coin seen accepted and one seen rejected."""
    gamma, v = e.candidates.shape[1] - 1, e.target_probs.shape[-1]
    index = torch.arange(e.m).repeat_interleave(gamma)
    k = torch.arange(gamma).repeat(e.m)
    pos = torch.arange(gamma)[None, :]

    def rejects(u: torch.Tensor) -> torch.Tensor:  # u [n, j] -> [n, j]
        j = u.shape[1]
        kk = k.repeat(j)
        coins = torch.where(pos == kk[:, None], u.T.reshape(-1)[:, None], 0.0)
        inputs = _inputs(e, index.repeat(j), coins, torch.ones(kk.numel(), v, dtype=torch.float64))
        return ~(_raw(engine, inputs) > kk).reshape(j, -1).T

    n = index.numel()
    ends = rejects(torch.stack([torch.zeros(n, dtype=torch.float64), torch.full((n,), MAX_COIN, dtype=torch.float64)], 1))
    at_zero, at_max = ~ends[:, 0], ~ends[:, 1]
    # Search below MAX_COIN, a coin seen rejected: a bracket ending at 1.0 could hand the engine a coin of 1.
    lo, hi = _search(rejects, torch.zeros(n, dtype=torch.float64), torch.full((n,), MAX_COIN, dtype=torch.float64), COIN_BITS)
    tau = torch.where(at_max, 1.0, torch.where(at_zero, (lo + hi) / 2, 0.0))
    # Coins the engine was seen to accept (lo) and to reject (hi, or 0 when it rejects everything).
    accept_coin = torch.where(at_max, MAX_COIN, lo)
    reject_coin = torch.where(at_zero, hi, 0.0)
    return tuple(x.reshape(e.m, gamma) for x in (tau, accept_coin, reject_coin))


def _block(result: VerifyResult, row: int) -> tuple:
    out = result.out_tokens[row]
    return tuple(int(t) for t in out[: int(result.commit_len[row])])


def derived_block_law(engine, e: Enumeration) -> dict[int, dict[tuple, float]]:
    """Per group, the law of the emitted block (token tuple -> probability), measured from the engine."""
    gamma, v = e.candidates.shape[1] - 1, e.target_probs.shape[-1]
    tau, accept_coin, reject_coin = coin_thresholds(engine, e)
    # Regions: raw = n for n = 0..gamma, coins in the middle of the measured intervals.
    n = torch.arange(gamma + 1)
    survive = torch.cat([torch.ones(e.m, 1, dtype=torch.float64), torch.cumprod(tau, 1)], 1)  # P(raw >= n)
    stop = torch.cat([1.0 - tau, torch.ones(e.m, 1, dtype=torch.float64)], 1)
    region_p = (survive * stop).reshape(-1)  # [M * (gamma+1)]
    row = torch.arange(e.m).repeat_interleave(gamma + 1)
    raw_n = n.repeat(e.m)
    live = region_p > 0
    row, raw_n, region_p = row[live], raw_n[live], region_p[live]
    r = row.numel()
    pos = torch.arange(gamma)[None, :]
    coins = torch.where(pos < raw_n[:, None], accept_coin[row], torch.where(pos == raw_n[:, None], reject_coin[row], 0.5))

    base = verify_step(engine, _inputs(e, row, coins, torch.ones(r, v, dtype=torch.float64)), "sampling")
    raw = base.correct_len.to(torch.int64) + base.cap_trim.to(torch.int64)
    bad = (raw != raw_n).nonzero()
    expect(bad.numel() == 0, "accepted-draft count inside a measured coin region",
           "n when drafts < n get coins seen accepted and draft n a coin seen rejected",
           None if bad.numel() == 0 else f"row {e.candidates[row[bad[0, 0]]].tolist()}: "
           f"n={int(raw_n[bad[0, 0]])}, engine {int(raw[bad[0, 0]])}")
    commit = base.commit_len.to(torch.int64)
    last = commit - 1  # index of the bonus in out_tokens
    x0 = base.out_tokens[torch.arange(r), last]

    # Search every (region, y) pair at once: weight ratio r(y) / r(x0) = 2**-t*.
    ys = torch.arange(v).repeat(r)  # [r * v]
    pair_region = torch.arange(r).repeat_interleave(v)
    is_x0 = ys == x0[pair_region]

    def y_wins(tt: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:  # pairs sel [n], tt [n, j] -> [n, j]
        j = tt.shape[1]
        reg, y = pair_region[sel].repeat(j), ys[sel].repeat(j)
        rows = torch.arange(reg.numel())
        noise = torch.full((reg.numel(), v), FLOOR_NOISE, dtype=torch.float64)
        noise[rows, x0[reg]] = 1.0
        noise[rows, y] = torch.where(y == x0[reg], 1.0, 2.0 ** tt.T.reshape(-1))
        res = verify_step(engine, _inputs(e, row[reg], coins[reg], noise), "sampling")
        got_commit = res.commit_len.to(torch.int64)
        same_prefix = (got_commit == commit[reg]) & (
            (res.out_tokens == base.out_tokens[reg]) | (torch.arange(gamma + 1)[None, :] >= last[reg, None])).all(1)
        bonus = res.out_tokens[rows, (got_commit - 1).clamp(min=0)]
        odd = (~same_prefix | ((bonus != x0[reg]) & (bonus != y))).nonzero()
        expect(odd.numel() == 0, "the bonus under probe noise",
               "an exponential race: the pick is x0 or y, and the accepted prefix does not move with the noise",
               None if odd.numel() == 0 else
               f"candidates {e.candidates[row[reg[odd[0, 0]]]].tolist()}, x0={int(x0[reg[odd[0, 0]]])}, "
               f"y={int(y[odd[0, 0]])}: emitted {res.out_tokens[odd[0, 0]].tolist()}")
        return (bonus == y).reshape(j, -1).T

    every = torch.arange(r * v)
    zero = torch.zeros(r * v, dtype=torch.float64)
    top = torch.full((r * v,), RATIO_LOG2_RANGE, dtype=torch.float64)
    ends = y_wins(torch.stack([zero, top], 1), every)
    wins_at_zero, wins_at_top = ends[:, 0] & ~is_x0, ends[:, 1] & ~is_x0  # at zero: a tie with x0
    ratio = (is_x0 | wins_at_zero).to(torch.float64)
    active = (wins_at_top & ~wins_at_zero).nonzero()[:, 0]  # y with 0 < r(y) < r(x0): search the ratio
    if active.numel():
        lo, hi = _search(lambda tt: y_wins(tt, active), zero[active], top[active], RATIO_BITS)
        ratio[active] = 2.0 ** -((lo + hi) / 2)
    bonus_law = ratio.reshape(r, v)
    bonus_law = bonus_law / bonus_law.sum(1, keepdim=True)

    laws: dict[int, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
    weight = e.weight[row] * region_p
    for i in range(r):
        head = _block(base, i)[:-1]
        g = int(e.group[row[i]])
        for y in bonus_law[i].nonzero()[:, 0].tolist():
            laws[g][head + (y,)] += float(weight[i] * bonus_law[i, y])
    return {g: dict(law) for g, law in laws.items()}


def first_token_law(block_law: dict[tuple, float], vocab: int) -> torch.Tensor:
    out = torch.zeros(vocab, dtype=torch.float64)
    for block, mass in block_law.items():
        out[block[0]] += mass
    return out


def first_draft_enumeration(inputs: VerifyInputs) -> Enumeration:
    """Per row b (group b): the first draft enumerated over its proposal law q_0 (weight q_0(d)), later
    drafts as given. With a one-hot draft (no draft probs) the row itself, weight 1."""
    bs = inputs.bs
    p = inputs.target_probs.to(torch.float64)
    if inputs.draft_probs is None:
        return Enumeration(inputs.candidates.to(torch.int64), p, None, torch.ones(bs, dtype=torch.float64),
                           torch.arange(bs), inputs.verify_lens)
    q = inputs.draft_probs.to(torch.float64)
    b, d = (q[:, 0] > 0).nonzero(as_tuple=True)
    cand = inputs.candidates.to(torch.int64)[b].clone()
    cand[:, 1] = d
    lens = None if inputs.verify_lens is None else inputs.verify_lens[b]
    return Enumeration(cand, p[b], q[b], q[b, 0, d], b, lens)


def markov_enumeration(target: torch.Tensor, draft: torch.Tensor, anchor: int, gamma: int, *,
                       one_hot: bool, verify_len: Optional[int] = None) -> Enumeration:
    """Every draft sequence of a first-order Markov draft ``draft`` [V, V] after ``anchor``, weighted by its
    probability, against the Markov target ``target`` [V, V] (row = law after that token). One group."""
    v = target.shape[0]
    seqs = torch.cartesian_prod(*[torch.arange(v)] * gamma).reshape(-1, gamma)
    cand = torch.cat([torch.full((seqs.shape[0], 1), anchor), seqs], 1)
    weight = torch.ones(seqs.shape[0], dtype=torch.float64)
    for k in range(gamma):
        weight = weight * draft[cand[:, k], cand[:, k + 1]]
    keep = weight > 0
    cand, weight = cand[keep], weight[keep]
    lens = None if verify_len is None else torch.full((cand.shape[0],), verify_len, dtype=torch.int64)
    return Enumeration(cand, target[cand], None if one_hot else draft[cand[:, :gamma]], weight,
                       torch.zeros(cand.shape[0], dtype=torch.int64), lens)
