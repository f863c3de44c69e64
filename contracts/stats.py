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
rate, so a contract with a family budget of 1e-6 fails a correct engine with
probability at most 1e-6 per run (exactly reproducible, with fixed seeds).

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
from dataclasses import dataclass

import torch

FAMILY_ALPHA = 1e-6  # per statistical contract run
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


def merge_cells(expected: torch.Tensor, observed: torch.Tensor, min_expected: float = MIN_EXPECTED):
    """Merge cells (positive expectation only) smallest-expected first until each group expects >= min_expected.

    Returns (expected, observed) per merged group, float64. A trailing group
    that stays below the threshold joins the group before it.
    """
    order = torch.argsort(expected, stable=True)
    groups_e, groups_o = [], []
    acc_e = acc_o = 0.0
    for i in order.tolist():
        acc_e += float(expected[i])
        acc_o += float(observed[i])
        if acc_e >= min_expected:
            groups_e.append(acc_e)
            groups_o.append(acc_o)
            acc_e = acc_o = 0.0
    if acc_e > 0:
        if groups_e:
            groups_e[-1] += acc_e
            groups_o[-1] += acc_o
        else:
            groups_e.append(acc_e)
            groups_o.append(acc_o)
    return torch.tensor(groups_e, dtype=torch.float64), torch.tensor(groups_o, dtype=torch.float64)


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

