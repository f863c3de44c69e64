"""RELAY-001 on unmodified SGLang 0.5.23: off CUDA, the overlap path's confidence relay reads the newest values with the
reader's generation, so a step's budget reads confidence one step old (the configured lag is 2) and a reused row
lends its previous occupant's history to the request that takes it. On CUDA the ring reads
`CONFIDENCE_RELAY_RING_LAG` publishes back with the generation copied at publish (right for RELAY-001's cases; a PD
pre-allocated row is RELAY-002, tests/sglang/test_cuda_relay_path.py). Giving the host path the ring, with the
writer's generation, makes the contract pass. Both findings share one root and one draft report.
"""

import pytest
import torch

from contracts.adapters.sglang import env as sglang_env
from contracts.adapters.sglang.corrections import host_relay_ring
from contracts.registry import all_contracts
from contracts.runner import _call as check_case
from contracts.runner import run_contract
from contracts.strategies.relay import REUSE_CASE
from contracts.violation import ContractViolation

pytestmark = pytest.mark.skipif(sglang_env.sglang_unavailable_reason() is not None,
                                reason=str(sglang_env.sglang_unavailable_reason()))


def test_both_relay_findings_share_one_report_and_keep_their_scripts(sglang_engine):
    from pathlib import Path

    from contracts import ledger

    root = Path(__file__).resolve().parents[2]
    found = {cid: ledger.engine_entries(sglang_engine, cid)[0].finding for cid in ("RELAY-001", "RELAY-002")}
    assert {f.report for f in found.values()} == {"findings/sglang/relay_writer_generation.md"}
    assert (root / found["RELAY-001"].report).is_file()
    assert len({f.repro for f in found.values()}) == 2 and all((root / f.repro).is_file() for f in found.values())
    assert not any((root / f.repro).with_suffix(".md").exists() for f in found.values())  # no second copy of the report
    text = (root / found["RELAY-001"].report).read_text()
    for f in found.values():
        assert Path(f.repro).name in text
    readme = (root / "findings" / "README.md").read_text()
    assert readme.count("(sglang/relay_writer_generation.md)") >= 2


def test_the_host_relay_reads_a_step_too_late_and_lends_a_reused_rows_history(sglang_engine):
    with pytest.raises(ContractViolation) as caught:
        check_case(all_contracts()["RELAY-001"], sglang_engine, REUSE_CASE)
    assert "step 1: budget" in caught.value.what or "survival the budget read" in caught.value.what


def test_a_reused_row_passes_on_the_previous_occupants_history(sglang_engine):
    """Step 2: request 2 takes request 0's row; its budget reads request 0's step-1 confidence."""
    reads = sglang_engine.run_confidence_relay(REUSE_CASE)
    joined = reads[2].rids.index(2)
    prior = REUSE_CASE.confidence(0, 1)
    assert reads[2].survival[joined] == pytest.approx([prior[0], prior[0] * prior[1]])


def test_the_ring_on_the_host_passes(sglang_engine, monkeypatch):
    host_relay_ring(monkeypatch)
    run_contract(all_contracts()["RELAY-001"], sglang_engine, profile="ci")


def test_without_overlap_the_planner_carry_already_passes(sglang_engine):
    from dataclasses import replace

    check_case(all_contracts()["RELAY-001"], sglang_engine, replace(REUSE_CASE, overlap=False))


def _carry_without_generation(mp):
    """Re-inserted: the budget planner's freshness check forgets the writer's generation."""
    from sglang.srt.speculative.dspark_components.dspark_planner import HostConfidenceBudgetPlanner

    def survival(self, *, lagged_confidence, lagged_generation, current_generation):
        k = torch.cumprod(lagged_confidence.to(torch.float32), dim=1)
        fresh = (current_generation.to(torch.int64) >= 1).view(-1, 1)
        return torch.where(fresh, k, torch.ones_like(k))

    mp.setattr(HostConfidenceBudgetPlanner, "_two_steps_prior_survival", survival)


def _carry_one_step_short(mp):
    """Re-inserted: the planner's carry holds one step less than the relay lag asks for."""
    from sglang.srt.speculative.dspark_components.dspark_planner import HostConfidenceBudgetPlanner

    real = HostConfidenceBudgetPlanner.__init__

    def init(self, **kw):
        real(self, **kw)
        self.carry_steps = max(self.carry_steps - 1, 0)

    mp.setattr(HostConfidenceBudgetPlanner, "__init__", init)


@pytest.mark.parametrize("bug", [_carry_without_generation, _carry_one_step_short], ids=lambda f: f.__name__.strip("_"))
def test_re_inserted_relay_bugs_are_caught(sglang_engine, monkeypatch, bug):
    """On top of the host-ring correction (so unmodified paths pass), each bug fails RELAY-001 with a shrunk case."""
    host_relay_ring(monkeypatch)
    bug(monkeypatch)
    with pytest.raises(ContractViolation) as caught:
        run_contract(all_contracts()["RELAY-001"], sglang_engine, profile="ci")
    assert caught.value.case is not None and caught.value.repro.startswith("python -c")
    assert "survival the budget read" in caught.value.what


def test_the_known_relay_finding_does_not_blind_its_contract(sglang_engine, monkeypatch):
    """RELAY-001 fails as the ledger knows; with a second relay bug re-inserted, the run with every known correction
    applied still fails, so `check` reports a failure, not the known one."""
    from contracts.runner import run_with_ledger

    contract = all_contracts()["RELAY-001"]
    with pytest.raises(pytest.xfail.Exception, match="with the known corrections: passed"):
        run_with_ledger(contract, sglang_engine)
    _carry_without_generation(monkeypatch)
    with pytest.raises(ContractViolation) as caught:
        run_with_ledger(contract, sglang_engine)
    assert "still fails with the known corrections" in "\n".join(getattr(caught.value, "__notes__", [])), caught.value
