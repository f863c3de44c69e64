"""The goodness-of-fit gate itself: exact p-values, calibrated on correct data, powerful on a known bias,
loud on meaningless input (contracts/stats.py)."""

import math

import pytest
import torch

from contracts import stats

# --- p-values ------------------------------------------------------------------------------------


@pytest.mark.parametrize("x", [0.0, 0.3, 1.0, 4.6, 13.8, 60.0])
def test_p_value_closed_forms(x):
    # dof 2: exp(-x/2); dof 1: erfc(sqrt(x/2)); dof 4: exp(-x/2) (1 + x/2).
    assert stats.chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-12, abs=1e-300)
    assert stats.chi2_sf(x, 1) == pytest.approx(math.erfc(math.sqrt(x / 2)), rel=1e-10, abs=1e-300)
    assert stats.chi2_sf(x, 4) == pytest.approx(math.exp(-x / 2) * (1 + x / 2), rel=1e-12, abs=1e-300)


def test_p_value_matches_scipy():
    special = pytest.importorskip("scipy.special")  # a cross-check only; stats.py does not need scipy
    for dof in (1, 3, 7, 30, 119, 1500):
        for x in (0.5 * dof, dof, 2.0 * dof + 10):
            assert stats.chi2_sf(x, dof) == pytest.approx(float(special.chdtrc(dof, x)), rel=1e-9, abs=1e-300)


def test_infinite_statistic_has_p_zero():
    assert stats.chi2_sf(math.inf, 3) == 0.0


# --- cell merging ---------------------------------------------------------------------------------


def test_merging_keeps_totals_and_reaches_five():
    expected = torch.tensor([0.5, 0.7, 1.0, 2.0, 3.0, 40.0, 52.8], dtype=torch.float64)
    observed = torch.tensor([1, 0, 2, 1, 4, 38, 54], dtype=torch.float64)
    e, o = stats.merge_cells(expected, observed)
    assert float(e.sum()) == pytest.approx(float(expected.sum()))
    assert float(o.sum()) == float(observed.sum())
    assert bool((e >= stats.MIN_EXPECTED).all())
    assert e.numel() == 3  # {0.5, 0.7, 1, 2, 3} -> 7.2, then 40 and 52.8


def test_small_trailing_group_joins_the_previous_one():
    e, o = stats.merge_cells(torch.tensor([6.0, 7.0, 1.0]), torch.tensor([5.0, 8.0, 1.0]))
    # sorted: 1 -> 1 + 6 = 7 (group), 7 (group)
    assert e.tolist() == [7.0, 7.0] and o.tolist() == [6.0, 8.0]


# --- calibration and power ------------------------------------------------------------------------


def _random_law(gen, cells):
    w = -(1 - torch.rand(cells, generator=gen, dtype=torch.float64)).log()
    w[torch.rand(cells, generator=gen) < 0.2] = 0.0  # zero cells, never observed under the law
    w[:2] = w.max() + 1e-3  # two cells share the top mass, so a test always keeps two merged cells
    return w / w.sum()


def _draw(gen, law, n):
    return torch.bincount(torch.multinomial(law, n, replacement=True, generator=gen), minlength=law.numel())


TRIALS = 1000


def test_gate_does_not_fire_on_correct_data():
    """Over 1000 seeded trials (2..60 cells, n = 500..20000) the p-values are calibrated and the gate never fires.

    Observed (seed 0): 16/1000 trials with p < 0.01, 94/1000 with p < 0.1, smallest p 8e-4, and 0 gate
    rejections at the Bonferroni share of the operating family budget (1e-3) across 10 tests.
    """
    gen = torch.Generator().manual_seed(0)
    alpha = stats.bonferroni(stats.FAMILY_ALPHA, 10)
    below_1pc = below_10pc = fired = 0
    for _ in range(TRIALS):
        cells = int(torch.randint(2, 61, (1,), generator=gen))
        n = int(torch.randint(500, 20_001, (1,), generator=gen))
        law = _random_law(gen, cells)
        result = stats.chi_square_gof(_draw(gen, law, n), law)
        assert result.impossible == 0
        below_1pc += result.p_value < 0.01
        below_10pc += result.p_value < 0.1
        fired += result.rejects(alpha)
    # Binomial(1000, 0.01) lies in [1, 25] and Binomial(1000, 0.1) in [65, 140] except with prob < 1e-5.
    assert 1 <= below_1pc <= 25, below_1pc
    assert 65 <= below_10pc <= 140, below_10pc
    assert fired == 0


def test_gate_fires_on_a_small_bias():
    """Biases of TV ~0.03 over 10 cells at n = 20000 are caught in 50 of 50 trials at the operating budget split
    10 ways (per-test alpha 1e-4).

    The bias mixes 3.3% of a point mass on the least likely cell into the law (TV 0.025-0.033).
    Observed (seed 1): 50/50 caught, smallest chi-square 264 (dof <= 9).
    """
    gen = torch.Generator().manual_seed(1)
    alpha = stats.bonferroni(stats.FAMILY_ALPHA, 10)
    caught = 0
    for _ in range(50):
        law = _random_law(gen, 10)
        rare = torch.where(law > 0, law, 2.0).argmin()
        biased = 0.967 * law
        biased[rare] += 0.033
        assert 0.025 <= 0.5 * float((biased - law).abs().sum()) <= 0.033
        result = stats.chi_square_gof(_draw(gen, biased, 20_000), law)
        caught += result.rejects(alpha)
    assert caught == 50


def test_an_impossible_token_fails_at_once():
    law = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    result = stats.chi_square_gof(torch.tensor([500, 499, 1]), law)
    assert result.impossible == 1 and result.p_value == 0.0 and result.rejects(1e-9)


def test_effect_size_floor_spares_a_harmless_deviation():
    """At n = 4e6 a TV 0.002 deviation (e.g. a law rounded to float32) has p ~ 0 but stays under the floor."""
    law = torch.full((4,), 0.25, dtype=torch.float64)
    n = 4_000_000
    counts = torch.tensor([n * 0.252, n * 0.248, n * 0.25, n * 0.25], dtype=torch.float64).round()
    result = stats.chi_square_gof(counts, law)
    assert result.p_value < 1e-12 and result.tvd < stats.TV_FLOOR
    assert not result.rejects(1e-7)


# --- the simulation that measures the gate (contracts.stats.simulated_rate, contracts.calibration) -------------


def test_vectorised_verdicts_match_the_gate_row_by_row():
    """`rejections` (what calibration simulates) is the gate's own verdict, draw for draw."""
    gen = torch.Generator().manual_seed(3)
    for cells, n, alpha in ((2, 50, 0.2), (9, 400, 0.05), (40, 3000, 0.01)):
        law = _random_law(gen, cells)
        draws = stats.multinomial_draws(law, n, 400, gen)
        got = stats.rejections(draws, law, alpha)
        want = torch.tensor([stats.chi_square_gof(d, law).rejects(alpha) for d in draws])
        assert torch.equal(got, want), (cells, n, alpha)


def test_multinomial_draws_have_the_right_law():
    gen = torch.Generator().manual_seed(4)
    law = torch.tensor([0.5, 0.0, 0.3, 0.2], dtype=torch.float64)
    draws = stats.multinomial_draws(law, 1000, 20_000, gen)
    assert bool((draws.sum(1) == 1000).all()) and bool((draws[:, 1] == 0).all())
    mean = draws.mean(0) / 1000
    assert torch.allclose(mean, law, atol=2e-3)  # sd of the mean ~ 3e-5 per cell
    var = draws[:, 0].var()
    assert abs(float(var) / (1000 * 0.25) - 1) < 0.05  # n p (1 - p)


def test_simulated_false_alarm_rate_is_the_nominal_alpha():
    """With no effect-size floor the simulated rate at alpha 0.01 lies within 4 sd of 0.01 (20,000 runs)."""
    law = _random_law(torch.Generator().manual_seed(5), 12)
    hits, draws = stats.simulated_rate(law, law, 2000, 0.01, draws=20_000, seed=6, tv_floor=0.0)
    assert abs(hits / draws - 0.01) < 4 * math.sqrt(0.01 * 0.99 / draws), hits


def test_simulated_power_grows_with_the_effect():
    from contracts.calibration import shifted

    law = _random_law(torch.Generator().manual_seed(7), 8)
    rates = [stats.simulated_rate(shifted(law, d), law, 20_000, 1e-4, draws=500, seed=8)[0] / 500 for d in (0.0, 0.01, 0.03)]
    assert rates[0] < 0.01 and rates[0] <= rates[1] <= rates[2] and rates[2] == 1.0, rates
    assert 0.5 * float((shifted(law, 0.03) - law).abs().sum()) == pytest.approx(0.03)


def test_upper_bound_is_clopper_pearson():
    assert stats.upper_bound(0, 1000) == pytest.approx(1 - 0.05 ** (1 / 1000), rel=1e-6)  # solves (1-p)^n = 0.05
    assert 0.01 < stats.upper_bound(10, 1000) < 0.02 and stats.upper_bound(5, 5) == 1.0


def test_the_gate_fails_through_the_contract_assertion_and_is_recorded():
    from contracts.violation import Mismatch

    law = torch.tensor([0.5, 0.5], dtype=torch.float64)
    with stats.recording() as seen:
        stats.gate([("fair", torch.tensor([500, 500]), law)])
        with pytest.raises(Mismatch, match="biased goodness of fit"):
            stats.gate([("fair", torch.tensor([500, 500]), law), ("biased", torch.tensor([900, 100]), law)])
    assert [(name, n, alpha) for name, _, n, alpha in seen] == [
        ("fair", 1000, stats.FAMILY_ALPHA / stats.TAIL_SAFETY), ("fair", 1000, stats.FAMILY_ALPHA / (2 * stats.TAIL_SAFETY)),
        ("biased", 1000, stats.FAMILY_ALPHA / (2 * stats.TAIL_SAFETY))]


def test_bonferroni_split():
    assert stats.bonferroni(1e-6, 10) == pytest.approx(1e-7)
    assert stats.bonferroni(1e-6, 1) == 1e-6


# --- meaningless input raises -----------------------------------------------------------------------

HALF = torch.tensor([0.5, 0.5], dtype=torch.float64)


@pytest.mark.parametrize("counts, law, match", [
    (torch.tensor([-1, 3]), HALF, "counts"),
    (torch.tensor([1.5, 3.0]), HALF, "counts"),
    (torch.tensor([float("nan"), 3.0]), HALF, "counts"),
    (torch.tensor([0, 0]), HALF, "counts"),
    (torch.tensor([1, 2, 3]), HALF, "counts"),
    (torch.tensor([]), torch.tensor([], dtype=torch.float64), "counts"),
    (torch.tensor([5, 5]), torch.tensor([0.6, 0.5], dtype=torch.float64), "law"),
    (torch.tensor([5, 5]), torch.tensor([1.5, -0.5], dtype=torch.float64), "law"),
    (torch.tensor([5, 5]), torch.tensor([float("inf"), 0.0], dtype=torch.float64), "law"),
    (torch.tensor([3, 0]), torch.tensor([1.0, 0.0], dtype=torch.float64), "law"),  # one cell: nothing to test
    (torch.tensor([3, 1]), HALF, "law"),  # 4 draws: merged into a single cell
], ids=["negative", "fractional", "nan", "no-observations", "shape", "empty", "law-sum", "law-negative",
        "law-inf", "single-cell", "too-few-draws"])
def test_meaningless_input_raises(counts, law, match):
    with pytest.raises(ValueError, match=f"^{match}:"):
        stats.chi_square_gof(counts, law)


@pytest.mark.parametrize("call", [
    lambda: stats.bonferroni(0.0, 3), lambda: stats.bonferroni(1.5, 3), lambda: stats.bonferroni(1e-6, 0),
    lambda: stats.chi2_sf(1.0, 0), lambda: stats.chi2_sf(-1.0, 2), lambda: stats.chi2_sf(float("nan"), 2),
    lambda: stats.chi_square_gof(torch.tensor([5, 5]), HALF).rejects(0.0),
], ids=["alpha-zero", "alpha-above-one", "no-tests", "dof-zero", "negative-statistic", "nan-statistic",
        "rejects-alpha"])
def test_bad_parameters_raise(call):
    with pytest.raises(ValueError):
        call()
