"""Exact float64 laws of the sampling verify, for contracts to test against.

Pure torch float64 with no randomness. Conventions match ``reference.py``:
draft ``d`` at a position is accepted with probability ``min(1, p(d)/q(d))``
(``q(d) == 0``: never accepted, and never proposed anyway); the first
rejection emits a draw from ``normalize(max(p - q, 0))`` (``p`` if that has no
mass); a full accept emits a bonus from the next target law; a verify length
``L`` turns position ``L`` into the last one, where an accepted draft is
itself the emitted bonus.

Toy models are *conditionals*: a callable mapping the full context (a tuple of
token ids, prompt included) to a float64 [V] law of the next token.
``markov`` and ``positional`` build the two simple kinds.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from typing import Callable

import torch

Conditional = Callable[[tuple[int, ...]], torch.Tensor]
Law = dict[tuple[int, ...], float]


def _f64(t: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(t, dtype=torch.float64)


def survival(confidence) -> list:
    """The running product of one row of per-position confidences, in float64 (Python floats)."""
    out, acc = [], 1.0
    for c in confidence:
        acc *= float(c)
        out.append(acc)
    return out


def smallest_size(sizes, n: int):
    """The smallest of `sizes` holding n (>= n), or None when none does."""
    return min((s for s in sizes if s >= n), default=None)


def residual_law(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``normalize(max(p - q, 0))`` over the last dim; ``p`` where that has no mass."""
    p, q = _f64(p), _f64(q)
    r = (p - q).clamp_min(0)
    mass = r.sum(-1, keepdim=True)
    return torch.where(mass > 0, r / torch.where(mass > 0, mass, 1.0), p)


def first_token_law(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Law of the token emitted at one position when the draft is drawn from ``q``.

    ``min(p, q) + (1 - sum(min(p, q))) * residual``; equals ``p`` (the
    losslessness identity) for any ``q``. Broadcasts over leading dims.
    """
    p, q = _f64(p), _f64(q)
    both = torch.minimum(p, q)
    return both + (1.0 - both.sum(-1, keepdim=True)) * residual_law(p, q)


def accept_count_law(p: torch.Tensor, q: torch.Tensor, *, one_hot: bool = False) -> torch.Tensor:
    """Law of the raw accepted-draft count when position laws do not depend on the drafts.

    p [..., >=gamma, V] target rows, q [..., gamma, V] draft rows; returns
    [..., gamma+1] with ``P(n) = prod_{i<n} a_i * (1 - a_n)``, ``a_i = sum min(p_i, q_i)``; with
    `one_hot` (each draft drawn from q but scored as a point mass, accepted with probability p(d)),
    ``a_i = sum q_i p_i``.
    """
    p, q = _f64(p), _f64(q)
    gamma = q.shape[-2]
    pairs = p[..., :gamma, :]
    alpha = (q * pairs).sum(-1) if one_hot else torch.minimum(pairs, q).sum(-1)  # [..., gamma]
    survive = torch.cat([torch.ones_like(alpha[..., :1]), torch.cumprod(alpha, -1)], -1)  # P(n >= k)
    stop = torch.cat([1.0 - alpha, torch.ones_like(alpha[..., :1])], -1)
    return survive * stop


def emitted_block_law(target: Conditional, draft: Conditional, gamma: int, *, prefix: tuple[int, ...] = (),
                      verify_len: int | None = None) -> Law:
    """Exact law of one verify step's emitted block (accepted drafts, then the bonus).

    Drafts are drawn from ``draft(context)`` one at a time; coins are
    integrated out analytically. Keys are the emitted token tuples (length 1
    to ``verify_len``, default gamma+1); values sum to 1. The cost is about
    V**gamma conditional calls, so keep V and gamma small.
    """
    width = gamma + 1 if verify_len is None else verify_len
    if not 1 <= width <= gamma + 1:
        raise ValueError(f"verify_len: must lie in [1, {gamma + 1}], got {verify_len}")
    law: Law = defaultdict(float)

    def walk(accepted: tuple[int, ...], mass: float) -> None:
        ctx = prefix + accepted
        p = _f64(target(ctx))
        if len(accepted) == gamma:  # every draft passed: bonus from the next target law
            for y, py in enumerate(p.tolist()):
                if py > 0:
                    law[accepted + (y,)] += mass * py
            return
        q = _f64(draft(ctx))
        take = torch.where(q > 0, torch.minimum(p, q), 0.0)  # P(propose x and accept it)
        last = len(accepted) == width - 1  # the verify cap: an accepted draft is the bonus
        for x, tx in enumerate(take.tolist()):
            if tx <= 0:
                continue
            if last:
                law[accepted + (x,)] += mass * tx
            else:
                walk(accepted + (x,), mass * tx)
        reject = max(1.0 - float(take.sum()), 0.0)
        if reject > 0:
            for y, ry in enumerate(residual_law(p, q).tolist()):
                if ry > 0:
                    law[accepted + (y,)] += mass * reject * ry

    walk((), 1.0)
    return dict(law)


def continuation_law(target: Conditional, prefix: tuple[int, ...], length: int) -> Law:
    """Law of ``length`` tokens sampled from the target alone after ``prefix``."""
    law: Law = {(): 1.0}
    for _ in range(length):
        nxt: Law = defaultdict(float)
        for seq, mass in law.items():
            for y, py in enumerate(_f64(target(prefix + seq)).tolist()):
                if py > 0:
                    nxt[seq + (y,)] += mass * py
        law = dict(nxt)
    return law


def complete_with_target(block_law: Law, target: Conditional, prefix: tuple[int, ...], length: int) -> Law:
    """Law of the first ``length`` tokens when a block is emitted and plain target sampling follows.

    A lossless verify makes this equal ``continuation_law(target, prefix, length)``.
    Blocks longer than ``length`` are truncated (marginalised).
    """
    law: Law = defaultdict(float)
    for block, mass in block_law.items():
        head = block[:length]
        for tail, tail_mass in continuation_law(target, prefix + head, length - len(head)).items():
            law[head + tail] += mass * tail_mass
    return dict(law)


def total_variation(a: Law, b: Law) -> float:
    """Total-variation distance between two laws over token tuples."""
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def markov(table: torch.Tensor, first: torch.Tensor | None = None) -> Conditional:
    """First-order Markov conditional: ``table[v]`` [V] is the law after token ``v``.

    ``first`` is the law for an empty context (default: uniform).
    """
    table = _f64(table)
    start = torch.full((table.shape[-1],), 1.0 / table.shape[-1], dtype=torch.float64) if first is None else _f64(first)
    return lambda ctx: table[ctx[-1]] if ctx else start


def positional(rows: torch.Tensor, offset: int = 0) -> Conditional:
    """Context-free per-position laws: ``rows[len(ctx) - offset]`` [V], whatever the tokens."""
    rows = _f64(rows)
    return lambda ctx: rows[len(ctx) - offset]


def lowest_argmax(x: torch.Tensor) -> torch.Tensor:
    """Argmax over the last dim with ties to the lowest index, stated explicitly (NaN-free inputs)."""
    idx = torch.arange(x.shape[-1])
    return torch.where(x == x.amax(-1, keepdim=True), idx, x.shape[-1]).amin(-1)


def _cut(row: list, keep) -> list:
    """`row` with every token `keep(more)` refuses set to 0, renormalised (correctly rounded sum); `more` is the
    list of the row's probabilities strictly greater than the token's (counted on a sorted copy: the same set as a
    scan)."""
    ascending = sorted(row)
    kept = [p if keep(ascending[bisect.bisect_right(ascending, p):]) else 0.0 for p in row]
    total = math.fsum(kept)
    return [p / total for p in kept]


def sampling_law(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """The law a sampler with these settings draws from, float64 over the last dim.

    ``softmax(logits / temperature)``; then, if ``0 < top_k < V``, only the ``top_k`` most likely tokens keep
    mass; then, if ``top_p < 1``, only the shortest run of most likely tokens whose mass reaches ``top_p``
    (the token that crosses ``top_p`` included); renormalised after each cut. Probability ties at a cut are
    kept together, so the law does not depend on how an engine breaks them.

    Each cut is decided token by token from its definition, not by sorting: a token survives top-k when fewer
    than k tokens are strictly more likely, and top-p when the tokens strictly more likely hold less than top_p.
    """
    if not temperature > 0:
        raise ValueError(f"temperature: must be > 0, got {temperature!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p: must lie in (0, 1], got {top_p!r}")
    p = torch.softmax(_f64(logits) / float(temperature), dim=-1)
    v = p.shape[-1]
    if not (0 < top_k < v or top_p < 1):
        return p
    rows = p.reshape(-1, v).tolist()
    for i, row in enumerate(rows):
        if 0 < top_k < v:
            row = _cut(row, lambda more: len(more) < top_k)
        if top_p < 1:
            # The sign of a correctly rounded sum is exact: no rounding of the mass before it meets top_p.
            row = _cut(row, lambda more: math.fsum([*more, -top_p]) < 0)
        rows[i] = row
    return torch.tensor(rows, dtype=torch.float64).reshape(p.shape)
