"""Goodness-of-fit machinery for the statistical contracts (float64, torch only).

A statistical contract tests observed counts against an exact law from an
independent float64 oracle. The gate fails a test only when *both*

* the chi-square p-value is below the test's share of the family-wise
  false-alarm budget (Bonferroni: ``alpha_family / number_of_tests``), and
* the total-variation distance between the observed frequencies and the law
  exceeds ``tv_floor`` (an effect-size floor, so that a harmless deviation,
  e.g. float32 rounding of the law at a huge N, never fails a run),

or when a cell the law gives probability 0 is observed at all (a decisive
failure: p-value 0). Requiring both conditions can only lower the false-alarm
rate. The chi-square tail is asymptotic, so the rate a family really has is
measured by simulation (`simulated_rate`, `contracts.calibration`) at the
operating budget of 1e-3 per contract run, where a measurement is possible.
With fixed seeds each verdict is exactly reproducible.

Cells whose expected count is below ``min_expected`` (5) are merged, smallest
first, before the chi-square statistic is computed. The p-value is the
regularised upper incomplete gamma function ``Q(dof/2, chi2/2)``, which torch
provides (``torch.special.gammaincc``), so scipy is not needed.

Meaningless input raises ``ValueError`` (never a silent pass): counts that are
negative, fractional or not finite; a law that is negative, not finite or does
not sum to 1; mismatched shapes; no observations; fewer than two cells with
positive expected count left after merging; an alpha outside (0, 1).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass

import torch

FAMILY_ALPHA = 1e-3  # per statistical contract run: small enough to trust, large enough to measure
# The asymptotic chi-square tail is anti-conservative far out: simulated at these tables' shapes, tests at a nominal
# alpha rejected up to 1.9x as often. Each test therefore gets half its Bonferroni share (contracts.calibration).
TAIL_SAFETY = 2
TV_FLOOR = 0.005
MIN_EXPECTED = 5.0
LAW_SUM_ATOL = 1e-9


@dataclass(frozen=True)
class GofResult:
    statistic: float  # chi-square after merging (inf when an impossible cell was observed)
    dof: int  # merged cells with positive expectation, minus 1
    p_value: float
    tvd: float  # total variation between observed frequencies and the law (unmerged cells)
    n: int  # observations
    cells: int  # cells before merging
    merged_cells: int  # cells after merging
    impossible: int  # observations in cells the law gives probability 0

    def rejects(self, alpha: float, tv_floor: float = TV_FLOOR) -> bool:
        """Fail iff an impossible cell was observed, or p < alpha with TV above the effect-size floor."""
        check_alpha(alpha)
        return self.impossible > 0 or (self.p_value < alpha and self.tvd > tv_floor)

    def describe(self) -> str:
        return (f"chi2={self.statistic:.4g} dof={self.dof} p={self.p_value:.3g} tv={self.tvd:.4g} n={self.n} "
                f"cells={self.cells}->{self.merged_cells} impossible={self.impossible}")


def check_alpha(alpha: float) -> float:
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise ValueError(f"alpha: must lie in (0, 1), got {alpha!r}")
    return float(alpha)


def bonferroni(family_alpha: float, tests: int) -> float:
    """Per-test alpha so that ``tests`` tests together false-alarm with probability <= family_alpha."""
    check_alpha(family_alpha)
    if not isinstance(tests, int) or tests < 1:
        raise ValueError(f"tests: need a positive number of tests, got {tests!r}")
    return family_alpha / tests


def chi2_sf(statistic: float, dof: int) -> float:
    """P(X >= statistic) for X ~ chi-square(dof), in float64."""
    if not isinstance(dof, int) or dof < 1:
        raise ValueError(f"dof: must be a positive int, got {dof!r}")
    if math.isnan(statistic) or statistic < 0:
        raise ValueError(f"statistic: must be >= 0, got {statistic!r}")
    if math.isinf(statistic):
        return 0.0
    a = torch.tensor(dof / 2.0, dtype=torch.float64)
    x = torch.tensor(statistic / 2.0, dtype=torch.float64)
    return float(torch.special.gammaincc(a, x))


def _as_f64(name: str, value) -> torch.Tensor:
    t = torch.as_tensor(value, dtype=torch.float64).flatten()
    if t.numel() == 0:
        raise ValueError(f"{name}: is empty")
    if not bool(torch.isfinite(t).all()) or bool((t < 0).any()):
        raise ValueError(f"{name}: must be finite and >= 0")
    return t


def merge_groups(expected: torch.Tensor, min_expected: float = MIN_EXPECTED) -> torch.Tensor:
    """Group index per cell: cells merge smallest-expected first until each group expects >= min_expected.

    A trailing group that stays below the threshold joins the group before it.
    """
    groups = torch.empty(expected.numel(), dtype=torch.int64)
    group, acc = 0, 0.0
    order = torch.argsort(expected, stable=True).tolist()
    for i in order:
        groups[i] = group
        acc += float(expected[i])
        if acc >= min_expected:
            group, acc = group + 1, 0.0
    if acc > 0 and group > 0:
        groups[groups == group] = group - 1
    return groups


def merge_cells(expected: torch.Tensor, observed: torch.Tensor, min_expected: float = MIN_EXPECTED):
    """(expected, observed) summed per merged group (see `merge_groups`), float64."""
    groups = merge_groups(expected, min_expected)
    size = int(groups.max()) + 1 if groups.numel() else 0
    e = torch.zeros(size, dtype=torch.float64).index_add_(0, groups, expected.to(torch.float64))
    o = torch.zeros(size, dtype=torch.float64).index_add_(0, groups, observed.to(torch.float64))
    keep = e > 0
    return e[keep], o[keep]


def chi_square_gof(counts, law, *, min_expected: float = MIN_EXPECTED) -> GofResult:
    """Test observed ``counts`` [K] (non-negative integers) against the exact law ``law`` [K] (sums to 1)."""
    observed = _as_f64("counts", counts)
    p = _as_f64("law", law)
    if observed.shape != p.shape:
        raise ValueError(f"counts: {observed.numel()} cells, but law has {p.numel()}")
    if not bool((observed == observed.round()).all()):
        raise ValueError("counts: must be whole numbers")
    if abs(float(p.sum()) - 1.0) > LAW_SUM_ATOL:
        raise ValueError(f"law: must sum to 1 within {LAW_SUM_ATOL}, sums to {float(p.sum())!r}")
    n = int(observed.sum())
    if n == 0:
        raise ValueError("counts: no observations")
    tvd = 0.5 * float((observed / n - p).abs().sum())
    possible = p > 0
    impossible = int(observed[~possible].sum())
    e, o = merge_cells(n * p[possible], observed[possible], min_expected)
    if e.numel() < 2:
        raise ValueError(f"law: fewer than 2 cells left after merging below expected count {min_expected} "
                         f"(n={n}, cells with mass={int(possible.sum())}): nothing to test")
    dof = int(e.numel()) - 1
    if impossible:
        return GofResult(math.inf, dof, 0.0, tvd, n, p.numel(), int(e.numel()), impossible)
    statistic = float(((o - e) ** 2 / e).sum())
    return GofResult(statistic, dof, chi2_sf(statistic, dof), tvd, n, p.numel(), int(e.numel()), 0)



# ---- the one gate the statistical contracts use ---------------------------------------------------

_RECORDERS: list = []


@contextmanager
def recording():
    """Collect every test the gate sees inside the block as (name, law, n, alpha): what calibration simulates."""
    seen: list = []
    _RECORDERS.append(seen)
    try:
        yield seen
    finally:
        _RECORDERS.remove(seen)


def table_test(name: str, counts: dict, law: dict) -> tuple:
    """A gate test from counts and an exact law keyed by outcome: one cell per outcome either of them names."""
    keys = sorted(set(law) | set(counts))
    return (name, torch.tensor([counts.get(k, 0) for k in keys]),
            torch.tensor([law.get(k, 0.0) for k in keys], dtype=torch.float64))


class Gate:
    """The gate for a family of ``size`` tests sharing ``family_alpha`` (Bonferroni), applied as each test's counts
    arrive: a rejection stops the run at once, with the verdict gating them all at the end would give."""

    def __init__(self, size: int, *, family_alpha: float = FAMILY_ALPHA, tv_floor: float = TV_FLOOR):
        self.size, self.family_alpha, self.tv_floor = size, family_alpha, tv_floor
        self.alpha = bonferroni(family_alpha, TAIL_SAFETY * size)

    def check(self, name: str, counts, law) -> None:
        """Fails through `contracts.checks.expect`, naming the test, the threshold and the observed statistics."""
        __tracebackhide__ = True
        from contracts.checks import expect

        result = chi_square_gof(counts, law)
        for seen in _RECORDERS:
            seen.append((name, torch.as_tensor(law, dtype=torch.float64).flatten(), result.n, self.alpha))
        expect(not result.rejects(self.alpha, self.tv_floor), f"{name} goodness of fit",
               f"p >= {self.alpha:.2g} or TV <= {self.tv_floor} (family of {self.size}, false alarm <= {self.family_alpha:g})",
               result.describe())


def gate(tests: list, *, family_alpha: float = FAMILY_ALPHA, tv_floor: float = TV_FLOOR) -> None:
    """tests: (name, counts, law) of one contract run, one `Gate` family; fails on the first test that rejects."""
    __tracebackhide__ = True
    family = Gate(len(tests), family_alpha=family_alpha, tv_floor=tv_floor)
    for name, counts, law in tests:
        family.check(name, counts, law)


# ---- simulation: the gate's false-alarm rate and power, measured rather than assumed ----------------


def multinomial_draws(law: torch.Tensor, n: int, draws: int, generator: torch.Generator) -> torch.Tensor:
    """[draws, K] counts ~ Multinomial(n, law), as a chain of binomials (O(draws * K), not O(draws * n))."""
    law = _as_f64("law", law)
    counts = torch.zeros(draws, law.numel(), dtype=torch.float64)
    left = torch.full((draws,), float(n), dtype=torch.float64)
    rest = 1.0
    for k in range(law.numel() - 1):
        share = min(1.0, float(law[k]) / rest) if rest > 0 else 0.0
        counts[:, k] = torch.binomial(left, torch.full_like(left, share), generator=generator)
        left = left - counts[:, k]
        rest -= float(law[k])
    counts[:, -1] = left
    return counts


def rejections(counts: torch.Tensor, law, alpha: float, tv_floor: float = TV_FLOOR) -> torch.Tensor:
    """Gate verdicts for a [D, K] stack of count vectors, all with the same n: `chi_square_gof(...).rejects` per row."""
    check_alpha(alpha)
    p = _as_f64("law", law)
    n = float(counts[0].sum())
    possible = p > 0
    impossible = counts[:, ~possible].sum(-1) > 0
    groups = merge_groups(n * p[possible])
    size = int(groups.max()) + 1
    e = torch.zeros(size, dtype=torch.float64).index_add_(0, groups, n * p[possible])
    o = torch.zeros(counts.shape[0], size, dtype=torch.float64).index_add_(1, groups, counts[:, possible])
    statistic = ((o - e) ** 2 / e).sum(-1)
    pv = torch.special.gammaincc(torch.tensor((size - 1) / 2.0, dtype=torch.float64), statistic / 2)
    tvd = 0.5 * (counts / n - p).abs().sum(-1)
    return impossible | ((pv < alpha) & (tvd > tv_floor))


def simulated_rate(sample_law, test_law, n: int, alpha: float, *, draws: int, seed: int,
                   tv_floor: float = TV_FLOOR, chunk: int = 1 << 16) -> tuple:
    """(rejections, draws) when n observations from ``sample_law`` are tested against ``test_law``.

    ``sample_law == test_law`` measures the false-alarm rate; a biased ``sample_law`` measures power.
    """
    gen = torch.Generator().manual_seed(seed)
    hits = 0
    for start in range(0, draws, chunk):
        d = min(chunk, draws - start)
        hits += int(rejections(multinomial_draws(sample_law, n, d, gen), test_law, alpha, tv_floor).sum())
    return hits, draws


def upper_bound(hits: int, trials: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound on a rate observed as hits/trials (bisection on the binomial tail)."""
    if hits >= trials:
        return 1.0
    tail = 1 - confidence
    lo, hi = hits / trials, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        cdf = float(torch.distributions.Binomial(trials, torch.tensor(mid, dtype=torch.float64))
                    .log_prob(torch.arange(hits + 1, dtype=torch.float64)).exp().sum())
        lo, hi = (mid, hi) if cdf > tail else (lo, mid)
    return hi
