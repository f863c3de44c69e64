"""The statistical gate's false-alarm rate and power, measured by simulation on the tests each contract really runs
(contracts.calibration). The CPU tests check the recording; the nightly one measures every family at the operating
budget (the README's table comes from `python -m contracts.calibration`, 1e6 simulated runs per test)."""

import pytest
import torch

from contracts import calibration, stats
from contracts.adapters.reference import ReferenceAdapter


def test_recording_keeps_the_tests_the_gate_judged():
    family = calibration.record("LOSSLESS-003", ReferenceAdapter())
    assert len(family.tests) == 8  # 2 draft kinds x 4 positions
    assert {alpha for *_, alpha in family.tests} == {stats.FAMILY_ALPHA / (stats.TAIL_SAFETY * 8)}
    assert all(n == 40_000 and abs(float(law.sum()) - 1) < 1e-9 for _, law, n, _ in family.tests)


@pytest.mark.parametrize("law", [torch.full((10,), 0.1, dtype=torch.float64),
                                 torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64)])
def test_the_power_shift_moves_the_mass_it_names(law):
    """A uniform law (DIST-002's PIT bins) has its likeliest and least likely cell at the same index: the shift must
    still move delta to another cell, or every power figure reads 0%."""
    out = calibration.shifted(law, 0.05)
    assert 0.5 * float((out - law).abs().sum()) == pytest.approx(0.05)
    assert float(out.sum()) == pytest.approx(1.0) and bool((out[law == 0] == 0).all())


def test_a_draw_share_is_calibrated_at_the_rows_it_runs(capsys):
    engine = ReferenceAdapter()
    engine.draw_shares = {"LOSSLESS-003": 0.5}
    assert {n for _, _, n, _ in calibration.record("LOSSLESS-003", engine).tests} == {20_000}
    with pytest.raises(SystemExit):
        calibration.main(["--draw-share", "0"])
    assert "--draw-share: must be in (0, 1]" in capsys.readouterr().err


def test_a_contract_without_a_gate_is_refused():
    with pytest.raises(ValueError, match="contract_id: VERIFY-001 ran no statistical gate"):
        calibration.record("VERIFY-001", ReferenceAdapter())


def test_a_small_measurement_reports_rates_and_power():
    family = calibration.measure(calibration.record("LOSSLESS-004", ReferenceAdapter()), draws=2000, power_draws=200)
    assert family.draws == 2000 and len(family.hits) == len(family.tests)
    assert 0 <= family.rate <= family.upper < 0.01
    weakest, strongest = family.power[0.05]
    assert weakest == strongest == 1.0
    assert "| LOSSLESS-004 | 8 |" in calibration.table([family])


@pytest.mark.nightly
@pytest.mark.parametrize("cid", calibration.STAT_CONTRACTS)
def test_false_alarm_rate_is_within_the_budget(cid):
    family = calibration.measure(calibration.record(cid, ReferenceAdapter()), draws=300_000, power_draws=500)
    assert family.rate <= stats.FAMILY_ALPHA, calibration.table([family])
    assert family.upper <= 1.25 * stats.FAMILY_ALPHA, calibration.table([family])
