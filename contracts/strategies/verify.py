"""Verify batches, two ways.

A recipe (`VerifyCase`): Hypothesis draws the shape, the row families and a seed, and `build` makes the
tensors with a seeded ``torch.Generator``; it reaches shapes (ties, bimodal, long tails, zero columns) at
sizes up to bs 16, V 64, gamma 8, and shrinks bs, gamma, the vocabulary, the family names and the caps.
Values (`ValueCase`): small batches whose every entry Hypothesis draws (integer logits, eighths, sixteenths),
so a counterexample shows the values and shrinks them. `any_cases` draws either.
"""

from __future__ import annotations

import math
import random

import torch
from hypothesis import strategies as st

from contracts import oracle
from contracts.boundary.verify import DyadicCase, MarkovCase, ValueCase, VerifyCase, VerifyInputs

# Probability-row shape families. Each maps (generator, rows, vocab) -> float64 [rows, vocab], rows sum to 1.
FAMILIES = ("sparse", "one_hot", "bimodal", "near_uniform", "long_tail", "ties", "zero_columns", "dense")
# How the drafts relate to the target rows.
DRAFT_MODES = ("sampled", "target_argmax", "early_reject", "tie_high", "uniform")


def _normalise(w: torch.Tensor) -> torch.Tensor:
    return w / w.sum(-1, keepdim=True)


def _perm_rows(gen, n, v):
    return torch.argsort(torch.rand(n, v, generator=gen, dtype=torch.float64), dim=-1)


def family_rows(gen: torch.Generator, family: str, n: int, v: int, zero_cols: torch.Tensor | None = None) -> torch.Tensor:
    """``n`` float64 probability rows over ``v`` tokens of one shape family."""
    u = lambda *s: torch.rand(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    if family == "one_hot":
        return torch.nn.functional.one_hot(torch.randint(0, v, (n,), generator=gen), v).to(torch.float64)
    if family == "sparse":  # 1..ceil(v/4) tokens with mass
        k = torch.randint(1, max(1, math.ceil(v / 4)) + 1, (n, 1), generator=gen)
        keep = _perm_rows(gen, n, v) < k
        return _normalise(torch.where(keep, -(1.0 - u(n, v)).log() + 1e-3, 0.0))
    if family == "bimodal":  # two tokens share ~98%, the rest a thin floor
        w = torch.full((n, v), 0.02 / v, dtype=torch.float64)
        modes = _perm_rows(gen, n, v)[:, :2]
        w.scatter_(1, modes, (0.49 + 0.02 * u(n, 2)))
        return _normalise(w)
    if family == "near_uniform":
        return _normalise(1.0 + 0.01 * (u(n, v) - 0.5))
    if family == "long_tail":  # Zipf 1/rank^2, ranks shuffled
        rank = _perm_rows(gen, n, v).to(torch.float64) + 1
        return _normalise(rank ** -2.0)
    if family == "ties":  # few exact levels: many exactly tied maxima
        w = torch.randint(0, 3, (n, v), generator=gen).to(torch.float64)
        w[:, 0] += (w.sum(-1) == 0).to(torch.float64)  # never an empty row
        return _normalise(w)
    if family == "zero_columns":  # dense, but the batch-wide zero columns get no mass
        w = -(1.0 - u(n, v)).log()
        if zero_cols is not None and not bool(zero_cols.all()):
            w = torch.where(zero_cols, 0.0, w)
        return _normalise(w)
    if family == "dense":
        return _normalise(-(1.0 - u(n, v)).log())
    raise ValueError(f"family: unknown probability-row family {family!r}")


def _rows(gen, family: str, n: int, v: int, zero_cols) -> torch.Tensor:
    if family != "mixed":
        return family_rows(gen, family, n, v, zero_cols)
    picks = torch.randint(0, len(FAMILIES), (n,), generator=gen)
    table = torch.stack([family_rows(gen, f, n, v, zero_cols) for f in FAMILIES])  # [F, n, v]
    return table[picks, torch.arange(n)]


def _highest_argmax(rows: torch.Tensor) -> torch.Tensor:
    idx = torch.arange(rows.shape[-1])
    return torch.where(rows == rows.amax(-1, keepdim=True), idx, -1).amax(-1)


def _drafts(gen, mode: str, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Drafts [bs, gamma] against target rows p [bs, gamma+1, V] and proposal rows q [bs, gamma, V]."""
    bs, gamma, v = q.shape
    if mode == "mixed":
        picks = torch.randint(0, len(DRAFT_MODES), (bs,), generator=gen)
        table = torch.stack([_drafts(gen, m, p, q) for m in DRAFT_MODES])
        return table[picks, torch.arange(bs)]
    best = oracle.lowest_argmax(p[:, :gamma])
    if mode == "sampled":
        flat = q.reshape(-1, v)
        return torch.multinomial(flat, 1, generator=gen).reshape(bs, gamma) if flat.shape[0] else best
    if mode == "target_argmax":
        return best
    if mode == "tie_high":
        return _highest_argmax(p[:, :gamma])
    if mode == "uniform":
        return torch.randint(0, v, (bs, gamma), generator=gen)
    if mode == "early_reject":  # target argmax up to a random position, then a token the target likes least
        cut = torch.randint(0, gamma, (bs, 1), generator=gen)
        worst = oracle.lowest_argmax(-p[:, :gamma])
        after = torch.randint(0, v, (bs, gamma), generator=gen)
        pos = torch.arange(gamma)[None, :]
        return torch.where(pos < cut, best, torch.where(pos == cut, worst, after))
    raise ValueError(f"draft_mode: unknown draft mode {mode!r}")


def build(case) -> VerifyInputs:
    """The tensors of a case; a pure function of the case (seeded generator, or its drawn values)."""
    if isinstance(case, ValueCase):
        return build_values(case)
    gen = torch.Generator().manual_seed(case.seed)
    bs, gamma, v = case.bs, case.gamma, case.vocab
    dtype = getattr(torch, case.dtype)
    zero_cols = torch.rand(v, generator=gen) < 0.3
    p = _rows(gen, case.target_family, bs * (gamma + 1), v, zero_cols).reshape(bs, gamma + 1, v)
    one_hot = case.draft_family == "one_hot"
    q_family = "dense" if one_hot else case.draft_family  # a one-hot draft still proposes from some law
    q = _rows(gen, q_family, bs * gamma, v, zero_cols).reshape(bs, gamma, v)
    drafts = _drafts(gen, case.draft_mode, p, q)
    anchor = torch.randint(0, v, (bs, 1), generator=gen)
    settings = (case.temperature, case.top_k, case.top_p)
    # Logits whose softmax at the temperature is p (-inf off its support, the argmax and ties of p); the target
    # law is p cut by top-k / top-p, from the oracle.
    if case.top_k or case.top_p < 1:
        # Distinct probabilities (a relative spread of 1e-3, which float32 keeps), so a top-k or top-p cut never
        # falls inside a tie: how a tie is broken is the engine's.
        rank = torch.argsort(torch.rand(p.shape, generator=gen, dtype=torch.float64), dim=-1).to(torch.float64)
        p = _normalise(p * (1 + 1e-3 * rank / v))
    logits = case.temperature * p.log()
    law = p if settings == (1.0, 0, 1.0) else oracle.sampling_law(logits, *settings)
    full = lambda x, dt: None if settings == (1.0, 0, 1.0) else torch.full((bs,), x, dtype=dt)  # noqa: E731
    return VerifyInputs(
        candidates=torch.cat([anchor, drafts], 1),
        target_logits=logits.to(dtype),
        target_probs=law.to(dtype),
        draft_probs=None if one_hot else q.to(dtype),
        coins=torch.rand(bs, gamma, generator=gen, dtype=torch.float64).to(dtype),
        resample_noise=(1.0 / torch.empty(bs, v, dtype=torch.float64).exponential_(generator=gen).clamp_min(1e-30)).to(dtype),
        verify_lens=None if case.verify_lens is None else torch.tensor(case.verify_lens, dtype=torch.int64),
        greedy_mask=torch.zeros(bs, dtype=torch.bool) if case.greedy is None else torch.tensor(case.greedy, dtype=torch.bool),
        prefix_lens=torch.randint(0, 4096, (bs,), generator=gen),
        temperatures=full(case.temperature, torch.float64), top_k=full(case.top_k, torch.int64),
        top_p=full(case.top_p, torch.float64),
    )


families = st.sampled_from(FAMILIES + ("mixed",))
# The target's (temperature, top_k, top_p), simplest first: temperatures other than 1, a top-k and a top-p cut.
SAMPLING = st.sampled_from([(1.0, 0, 1.0), (0.5, 0, 1.0), (1.5, 0, 1.0), (0.7, 3, 1.0), (1.2, 0, 0.8), (1.0, 4, 0.6)])
draft_modes = st.sampled_from(DRAFT_MODES + ("mixed",))
seeds = st.integers(0, 2**32 - 1)


def _caps(draw, bs: int, gamma: int) -> tuple:
    """Per-row verify lengths in [1, gamma+1]: all one value (1 and gamma+1 included), or mixed per row."""
    kind = draw(st.sampled_from(("same", "per_row")), label="caps")
    if kind == "same":
        return (draw(st.integers(1, gamma + 1), label="verify_len"),) * bs
    rnd = random.Random(draw(seeds, label="verify_lens_seed"))
    return tuple(rnd.randint(1, gamma + 1) for _ in range(bs))


@st.composite
def verify_cases(draw, *, min_bs=0, max_bs=16, max_vocab=64, max_gamma=8, capped=None, one_hot=None,
                 mixed=None, dtypes=("float64", "float32")) -> VerifyCase:
    """bs 0..16, vocabulary 2..64, gamma 1..8; caps in [1, gamma+1] or none; one-hot or sampled drafts."""
    bs = draw(st.integers(min_bs, max_bs), label="bs")
    gamma = draw(st.integers(1, max_gamma), label="gamma")
    vocab = draw(st.integers(2, max_vocab), label="vocab")
    target = draw(families, label="target_family")
    use_one_hot = draw(st.booleans(), label="one_hot_draft") if one_hot is None else one_hot
    draft = "one_hot" if use_one_hot else draw(families, label="draft_family")
    mode = draw(draft_modes, label="draft_mode")
    use_cap = draw(st.booleans(), label="capped") if capped is None else capped
    lens = _caps(draw, bs, gamma) if use_cap else None
    greedy = None
    if mixed if mixed is not None else draw(st.booleans(), label="mixed"):
        # One drawn integer rather than a drawn list: per-row lists cost more Hypothesis time than the check.
        rnd = random.Random(draw(seeds, label="greedy_mask_seed"))
        greedy = tuple(rnd.random() < 0.5 for _ in range(bs))
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    temperature, top_k, top_p = draw(SAMPLING, label="sampling")
    return VerifyCase(bs, gamma, vocab, target, draft, mode, draw(seeds, label="seed"), lens, greedy, dtype,
                      temperature, top_k, top_p)


def build_values(case: ValueCase) -> VerifyInputs:
    bs, gamma, v = case.bs, case.gamma, case.vocab
    logits = torch.tensor(case.logits, dtype=torch.float64).reshape(bs, gamma + 1, v)  # bs 0: empty of that shape
    q = None if case.draft_eighths is None else torch.tensor(case.draft_eighths, dtype=torch.float64).reshape(bs, gamma, v) / 8
    return VerifyInputs(
        candidates=torch.tensor(case.candidates, dtype=torch.int64).reshape(bs, gamma + 1),
        target_logits=logits, target_probs=torch.softmax(logits, -1), draft_probs=q,
        coins=torch.tensor(case.coins_sixteenths, dtype=torch.float64).reshape(bs, gamma) / 16,
        resample_noise=torch.ones(bs, v, dtype=torch.float64),
        verify_lens=None if case.verify_lens is None else torch.tensor(case.verify_lens, dtype=torch.int64),
        greedy_mask=torch.zeros(bs, dtype=torch.bool) if case.greedy is None else torch.tensor(case.greedy, dtype=torch.bool),
        prefix_lens=torch.zeros(bs, dtype=torch.int64))


def _digits(draw, n: int, base: int, label: str) -> tuple:
    """n values in [0, base) from one drawn integer (its base-`base` digits, first value lowest). One choice per
    row instead of one per value: the shrinker's cost grows with the number of choices, so a failing case shrinks
    several times faster, to the same values (the integer shrinks towards 0, zeroing the later values first)."""
    code = draw(st.integers(0, base ** n - 1), label=label)
    out = []
    for _ in range(n):
        code, digit = divmod(code, base)
        out.append(digit)
    return tuple(out)


def _eighths(draw, v: int, label: str) -> tuple:
    """A draft row: 8 hits on tokens (so eighths summing to 1); shrinks towards all mass on token 0."""
    hits = _digits(draw, 8, v, label)
    return tuple(hits.count(t) for t in range(v))


@st.composite
def value_cases(draw, *, min_bs=0, max_bs=4, max_vocab=6, max_gamma=4, mixed=None) -> ValueCase:
    """bs 0..4, vocabulary 2..6, gamma 1..4, every value drawn: logits in 0..3 (ties), drafts in [0, V)."""
    bs = draw(st.integers(min_bs, max_bs), label="bs")
    gamma = draw(st.integers(1, max_gamma), label="gamma")
    v = draw(st.integers(2, max_vocab), label="vocab")
    ints = lambda n, hi, label: _digits(draw, n, hi + 1, label)  # noqa: E731
    cand = tuple(ints(gamma + 1, v - 1, f"candidates {b}") for b in range(bs))
    logits = tuple(tuple(ints(v, 3, f"logits {b},{j}") for j in range(gamma + 1)) for b in range(bs))
    one_hot = draw(st.booleans(), label="one_hot_draft")
    q = None if one_hot else tuple(tuple(_eighths(draw, v, f"draft row {b},{j}") for j in range(gamma)) for b in range(bs))
    coins = tuple(ints(gamma, 15, f"coins {b}") for b in range(bs))
    lens = _caps(draw, bs, gamma) if draw(st.booleans(), label="capped") else None
    greedy = None
    if mixed if mixed is not None else draw(st.booleans(), label="mixed"):
        greedy = tuple(draw(st.booleans(), label=f"greedy {b}") for b in range(bs))
    return ValueCase(v, gamma, cand, logits, q, coins, lens, greedy)


def any_cases(*, min_bs=0, mixed=None):
    """Recipes (large, shaped) or drawn values (small, shrinkable), half each."""
    return st.one_of(verify_cases(min_bs=min_bs, mixed=mixed), value_cases(min_bs=min_bs, mixed=mixed))


# Both drafts pass (coin 0, q(d) = 1, p(d) = 1/2) but the cap stops at L = 2, so the bonus must be the accepted draft
# d_2 = 0, while the last target row would draw token 1.
CAPPED_ACCEPT = DyadicCase(vocab=2, gamma=2, candidates=((0, 0, 0),), target_eighths=(((4, 4), (4, 4), (0, 8)),),
                           draft_eighths=(((8, 0), (8, 0)),), coins_sixteenths=((0, 0),), verify_lens=(2,), dtype="float64")
# Two rows whose drafts the greedy target accepts in full, capped at 1 and 3: each row's own cap bounds correct_len.
PER_ROW_CAPS = ValueCase(vocab=2, gamma=2, candidates=((0, 0, 0), (0, 0, 0)), logits=(((1, 0),) * 3, ((1, 0),) * 3),
                         draft_eighths=None, coins_sixteenths=((0, 0), (0, 0)), verify_lens=(1, 3))


# One row, two tokens, a one-hot draft the target rejects about half the time: the residual decides half the first
# token's law, so a wrong residual fails the first example (the cheapest to run, through an interpreter too).
HALF_REJECTED = VerifyCase(bs=1, gamma=1, vocab=2, target_family="near_uniform", draft_family="one_hot",
                           draft_mode="uniform", seed=0)

# A regression example: ties in the target, a one-hot draft, and caps of 1 and gamma+1.
TIE_CASE = VerifyCase(bs=3, gamma=3, vocab=5, target_family="ties", draft_family="one_hot", draft_mode="tie_high",
                      seed=7, verify_lens=(1, 4, 2), greedy=(True, False, True))


def build_dyadic(case: DyadicCase) -> VerifyInputs:
    bs, gamma, v = case.bs, case.gamma, case.vocab
    dtype = getattr(torch, case.dtype)
    p = (torch.tensor(case.target_eighths, dtype=torch.float64).reshape(bs, gamma + 1, v) / 8).to(dtype)
    q = None if case.draft_eighths is None else torch.tensor(case.draft_eighths, dtype=torch.float64).reshape(bs, gamma, v) / 8
    return VerifyInputs(
        candidates=torch.tensor(case.candidates, dtype=torch.int64).reshape(bs, gamma + 1), target_logits=p,
        target_probs=p, draft_probs=None if q is None else q.to(dtype),
        coins=(torch.tensor(case.coins_sixteenths, dtype=torch.float64).reshape(bs, gamma) / 16).to(dtype),
        resample_noise=torch.ones(bs, v, dtype=dtype),
        verify_lens=None if case.verify_lens is None else torch.tensor(case.verify_lens, dtype=torch.int64),
        greedy_mask=torch.zeros(bs, dtype=torch.bool), prefix_lens=torch.zeros(bs, dtype=torch.int64))


@st.composite
def dyadic_cases(draw, max_bs=3, max_vocab=5, max_gamma=4) -> DyadicCase:
    """bs 1..3, vocabulary 2..5, gamma 1..4; shrinks towards mass on token 0, coins 0 and drafts 0."""
    bs = draw(st.integers(1, max_bs), label="bs")
    gamma = draw(st.integers(1, max_gamma), label="gamma")
    v = draw(st.integers(2, max_vocab), label="vocab")
    rows = lambda n, label: tuple(tuple(_eighths(draw, v, f"{label} {b},{j}") for j in range(n)) for b in range(bs))  # noqa: E731
    cand = tuple(_digits(draw, gamma + 1, v, f"candidates {b}") for b in range(bs))
    p = rows(gamma + 1, "target row")
    q = None if draw(st.booleans(), label="one_hot") else rows(gamma, "draft row")
    coins = tuple(_digits(draw, gamma, 16, f"coins {b}") for b in range(bs))
    lens = _caps(draw, bs, gamma) if draw(st.booleans(), label="capped") else None
    return DyadicCase(v, gamma, cand, p, q, coins, lens, draw(st.sampled_from(("float32", "float64")), label="dtype"))


def build_markov(case: MarkovCase):
    """(target table [V, V], draft table [V, V], anchors [bs]) in float64; rows are laws after a token."""
    gen = torch.Generator().manual_seed(case.seed)
    v = case.vocab
    zero_cols = torch.rand(v, generator=gen) < 0.3
    target = _rows(gen, case.target_family, v, v, zero_cols)
    if case.draft_family == "target_greedy":
        draft = torch.nn.functional.one_hot(oracle.lowest_argmax(target), v).to(torch.float64)
    else:
        draft = _rows(gen, case.draft_family, v, v, zero_cols)
    return target, draft, torch.randint(0, v, (case.bs,), generator=gen)


@st.composite
def markov_cases(draw, *, max_bs=8, max_vocab=8, max_gamma=6, max_blocks=None, draft_families=None) -> MarkovCase:
    """A Markov target/draft pair; ``max_blocks`` bounds vocab**gamma (exact enumeration)."""
    bs = draw(st.integers(1, max_bs), label="bs")
    vocab = draw(st.integers(2, max_vocab), label="vocab")
    top = max_gamma if max_blocks is None else max(1, min(max_gamma, int(math.log(max_blocks) / math.log(vocab))))
    gamma = draw(st.integers(1, top), label="gamma")
    target = draw(families, label="target_family")
    draft = draw(st.sampled_from(draft_families or FAMILIES + ("mixed", "target_greedy")), label="draft_family")
    lens = _caps(draw, bs, gamma) if draw(st.booleans(), label="capped") else None
    return MarkovCase(bs, vocab, gamma, target, draft, draw(seeds, label="seed"), lens)
