"""RELAY-001 on SGLang 0.5.23's CUDA confidence-relay path (the ring), run on this CPU
(`contracts.adapters.sglang.relay_cuda_path`: overlap_utils on its `is_cuda()` branch, with stand-ins only for the
D2H stream, its events and pinned allocations; the scheduler's entry points driven as `SGLangRelay` drives the host
path).

Outcome (finding RELAY-002): the ring reads the right step (`CONFIDENCE_RELAY_RING_LAG` publishes back) and a row
freed and taken by a new request just before a step is handled: the ledger's shrunk case, reused rows and the
generated cases all pass. It fails for a row a PD decode server pre-allocates before the request's KV transfer
completes: `issue_ring_copy` (managers/overlap_utils.py:245) copies the pool's `req_generation` at publish for EVERY
row, while `confidence_buf` still holds the row's previous occupant's confidence (the prebuilt batch publishes no
confidence). Every publish during the transfer so snapshots the new request's generation next to the old request's
confidence, and `HostConfidenceBudgetPlanner._two_steps_prior_survival`'s freshness check passes it: the new request's
first steps (the first when the transfer spans >= 2 decode steps, the second when it spans >= 1) plan their budget
from the previous occupant's confidence instead of 1s. Recording, per row, the generation of the request that wrote
the confidence (`writer_generation_fix`) makes RELAY-001 pass.
"""

import pytest

from contracts.adapters.sglang import env as sglang_env
from contracts.boundary.relay import RelayCase, RelayStep
from contracts.registry import all_contracts
from contracts.runner import _call as check_case
from contracts.runner import run_contract
from contracts.strategies.relay import REUSE_CASE
from contracts.violation import ContractViolation

pytestmark = pytest.mark.skipif(sglang_env.sglang_unavailable_reason() is not None,
                                reason=str(sglang_env.sglang_unavailable_reason()))

RELAY = "RELAY-001"

# Reused rows on the local path (rows taken just before the step, as SGLangRelay drives them).
# The row is taken at once and the ring still holds its previous occupant's confidence in both lagged slots.
REUSE_AT_ONCE = RelayCase(pool_size=2, gamma=3, overlap=True,
                          steps=(RelayStep(join=(0, 1)), RelayStep(), RelayStep(), RelayStep(leave=(1,), join=(2,)),
                                 RelayStep(), RelayStep()))
# The same row reused twice within the lag: request 2 takes request 0's row, leaves after one step, request 3 takes it.
REUSE_TWICE = RelayCase(pool_size=2, gamma=2, overlap=True,
                        steps=(RelayStep(join=(0, 1)), RelayStep(), RelayStep(leave=(0,), join=(2,)),
                               RelayStep(leave=(2,), join=(3,)), RelayStep(), RelayStep()))
# A row freed, left empty for a step, then taken.
REUSE_AFTER_GAP = RelayCase(pool_size=2, gamma=2, overlap=True,
                            steps=(RelayStep(join=(0, 1)), RelayStep(), RelayStep(leave=(0,)), RelayStep(join=(2,)),
                                   RelayStep(), RelayStep()))

# PD decode: request 0 finishes after step 1 and frees row 1; request 2 is pre-allocated that row before step 2 (its KV
# transfer in flight through steps 2 and 3) and joins the running batch at step 4 (prebuilt, merged, then decode).
PD_CASE = RelayCase(pool_size=2, gamma=2, overlap=True,
                    steps=(RelayStep(join=(0, 1)), RelayStep(), RelayStep(leave=(0,)), RelayStep(),
                           RelayStep(join=(2,)), RelayStep(), RelayStep()))


def _engine(**options):
    from contracts.adapters.sglang.relay_cuda_path import SGLangCudaRelay

    return SGLangCudaRelay(**options)


def _survival(conf):
    out, p = [], 1.0
    for c in conf:
        p *= c
        out.append(p)
    return out


# ---- the CUDA branch is what runs ----------------------------------------------------------------------------------


def test_the_ring_branch_runs_and_the_stand_ins_are_scoped():
    from sglang.srt.managers import overlap_utils as ou

    from contracts.adapters.sglang.relay_cuda_path import StandInEvent, StandInStream, cuda_ring_branch

    real_torch, real_is_cuda = ou.torch, ou._is_cuda
    engine = _engine()
    engine.run_confidence_relay(REUSE_CASE)
    log = engine.last_log
    assert len(log.streams) == 1 and isinstance(log.streams[0], StandInStream)  # FutureMap.fwd_prepare_d2h_stream
    # one copy_done per ring slot (_lazy_init) and publish_ready; each publish records publish_ready and one copy_done
    assert len(log.events) == ou.CONFIDENCE_RELAY_RING_DEPTH + 1 and all(isinstance(e, StandInEvent) for e in log.events)
    publishes = len(REUSE_CASE.steps)
    assert sum(e.records for e in log.events) == 2 * publishes
    # resolve queried copy_done[ring_pos - LAG] at every step once LAG publishes were issued: the ring was read
    assert log.ring_queries == publishes - ou.CONFIDENCE_RELAY_RING_LAG
    assert log.streams[0].waits == publishes  # issue_ring_copy: stream.wait_event(publish_ready)
    assert ou.torch is real_torch and ou._is_cuda is real_is_cuda is False  # nothing outlives the block
    with cuda_ring_branch():
        assert ou._is_cuda is True and ou.torch is not real_torch
    assert ou.torch is real_torch and ou._is_cuda is False


# ---- local rows: the CUDA path satisfies RELAY-001 ------------------------------------------------------------------


def test_the_ledgers_shrunk_case_passes_on_the_ring():
    """RELAY-001's shrunk case (ledger: the host path reads step 0 at step 1, and request 0's history for request 2)."""
    engine = _engine()
    check_case(all_contracts()[RELAY], engine, REUSE_CASE)
    reads = engine.run_confidence_relay(REUSE_CASE)
    assert [r.survival is None for r in reads[:2]] == [True, True]  # nothing LAG publishes back yet
    r2 = reads[2].rids.index(2)
    assert reads[2].survival[r2] == [1.0, 1.0] and reads[3].survival[r2] == [1.0, 1.0]  # not request 0's history
    assert reads[4].survival[r2] == pytest.approx(_survival(REUSE_CASE.confidence(2, 2)))


@pytest.mark.parametrize("case", [REUSE_AT_ONCE, REUSE_TWICE, REUSE_AFTER_GAP],
                         ids=["reused-at-once", "reused-twice-within-lag", "reused-after-gap"])
def test_a_reused_row_passes_on_the_ring(case):
    check_case(all_contracts()[RELAY], _engine(), case)


def test_generated_cases_pass_on_the_ring():
    run_contract(all_contracts()[RELAY], _engine(), profile="ci")


# ---- PD decode pre-allocation: the finding -------------------------------------------------------------------------


def test_pd_prealloc_row_reads_the_previous_occupants_confidence():
    """RELAY-002: request 2's first decode step reads request 0's step-1 confidence (the row's last write), which the
    ring snapshotted at step 2 with request 2's generation."""
    engine = _engine(pd_prealloc={2: 2})
    with pytest.raises(ContractViolation) as caught:
        check_case(all_contracts()[RELAY], engine, PD_CASE)
    v = caught.value
    assert v.what == "step 4: survival the budget read for request 2"
    assert v.expected.startswith("[1.0, 1.0] (1s: it joined at step 4, after step 2)")
    previous = _survival(PD_CASE.confidence(0, 1))  # [0.25, 0.078125]
    assert v.observed == pytest.approx(previous)

    reads = engine.run_confidence_relay(PD_CASE)
    r2 = reads[4].rids.index(2)
    assert reads[4].survival[r2] == pytest.approx(previous)  # expected [1, 1]
    assert reads[5].survival[r2] == pytest.approx(previous)  # expected [1, 1]
    assert reads[6].survival[r2] == pytest.approx(_survival(PD_CASE.confidence(2, 4)))  # its own, as expected
    assert engine.last_log.ring_queries > 0  # read through the ring


def test_a_one_step_transfer_already_misreads_the_second_step():
    """Pre-allocated one step before it joins: step 4 reads the snapshot of step 2 (old generation: 1s, right), step 5
    the snapshot of step 3, taken after the pre-allocation (new generation, request 0's confidence)."""
    with pytest.raises(ContractViolation) as caught:
        check_case(all_contracts()[RELAY], _engine(pd_prealloc={2: 3}), PD_CASE)
    assert caught.value.what == "step 5: survival the budget read for request 2"
    assert caught.value.observed == pytest.approx(_survival(PD_CASE.confidence(0, 1)))


def test_the_same_pd_pool_passes_when_the_row_is_taken_at_the_join():
    """Same pool, prebuilt path and order; only the pre-allocation moved to the join step: the early allocation is the
    cause, not the PD pool or the prebuilt publish."""
    check_case(all_contracts()[RELAY], _engine(pd_prealloc={}), PD_CASE)


def test_the_host_path_misreads_the_same_pd_case(sglang_engine):
    """For comparison: the host path (RELAY-001) fails the PD case too, already at step 1 (one step old)."""
    with pytest.raises(ContractViolation) as caught:
        check_case(all_contracts()[RELAY], sglang_engine, PD_CASE)
    assert caught.value.what.startswith("step 1: ")


# ---- the correction ------------------------------------------------------------------------------------------------


def test_writer_generation_makes_the_pd_cases_pass():
    engine = _engine(pd_prealloc={2: 2}, writer_generation_fix=True)
    check_case(all_contracts()[RELAY], engine, PD_CASE)
    check_case(all_contracts()[RELAY], _engine(pd_prealloc={2: 3}, writer_generation_fix=True), PD_CASE)
    reads = engine.run_confidence_relay(PD_CASE)
    r2 = reads[4].rids.index(2)
    assert reads[4].survival[r2] == [1.0, 1.0] and reads[5].survival[r2] == [1.0, 1.0]


@pytest.mark.parametrize("lead", [1, 2, 3])
def test_writer_generation_passes_generated_pd_cases(lead):
    """Every request joining after step 0 pre-allocated `lead` steps early (rows reused or fresh)."""
    run_contract(all_contracts()[RELAY], _engine(pd_lead=lead, writer_generation_fix=True), profile="ci")


def test_writer_generation_keeps_the_local_cases_passing():
    run_contract(all_contracts()[RELAY], _engine(writer_generation_fix=True), profile="ci")


def test_generated_pd_cases_find_the_failure_unfixed():
    """The generated cases find RELAY-002 on their own (pre-allocation 2 steps early), and shrink it."""
    with pytest.raises(ContractViolation) as caught:
        run_contract(all_contracts()[RELAY], _engine(pd_lead=2), profile="ci")
    assert caught.value.case is not None and caught.value.case.overlap
    assert "survival the budget read" in caught.value.what


# ---- RELAY-002 as `check --engine sglang` runs it (the pack's relay.prealloc cases, on the ring) -------------------


def test_the_pack_runs_prealloc_cases_on_the_ring(sglang_engine, monkeypatch):
    """The sglang pack's RELAY-002 cases go through overlap_utils' CUDA branch (the ring is read), its PD decode
    pool and prebuilt path; RELAY-001's cases stay on this CPU's own (host) branch."""
    from sglang.srt.disaggregation.decode import DecodeReqToTokenPool
    from sglang.srt.managers import overlap_utils as ou

    from contracts.strategies.relay import PREALLOC_CASE

    ring_reads, pools = [], []
    real_resolve, real_init = ou.ConfidenceRelay.resolve, DecodeReqToTokenPool.__init__

    def resolve(self, batch, *, stream, publish_ready):
        ring_reads.append(stream is not None and publish_ready is not None)
        return real_resolve(self, batch, stream=stream, publish_ready=publish_ready)

    def init(self, *a, **k):
        pools.append(self)
        real_init(self, *a, **k)

    monkeypatch.setattr(ou.ConfidenceRelay, "resolve", resolve)
    monkeypatch.setattr(DecodeReqToTokenPool, "__init__", init)
    sglang_engine.run_confidence_relay(PREALLOC_CASE)
    assert pools and ring_reads and all(ring_reads)
    ring_reads.clear()
    sglang_engine.run_confidence_relay(REUSE_CASE)
    assert ring_reads and not any(ring_reads)


def test_relay_002_fails_on_the_field_the_ledger_names(sglang_engine):
    from contracts import ledger
    from contracts.strategies.relay import PREALLOC_CASE

    with pytest.raises(ContractViolation) as caught:
        check_case(all_contracts()["RELAY-002"], sglang_engine, PREALLOC_CASE)
    v = caught.value
    assert v.what == "step 4: survival the budget read for request 2 (its row taken at step 2, before it joined at step 4)"
    assert v.observed == pytest.approx(_survival(PREALLOC_CASE.confidence(0, 1)))  # request 0's step 1
    (entry,) = ledger.engine_entries(sglang_engine, "RELAY-002")
    assert entry.matches(v) and entry.finding.repro.endswith("relay_002_cuda_ring_generation.py")


def test_writer_generation_makes_relay_002_pass_on_the_pack(sglang_engine, monkeypatch):
    """The ledger's correction alone (no other) makes the whole contract pass, generated cases included."""
    from contracts.adapters.sglang.corrections import writer_generation_recorded

    writer_generation_recorded(monkeypatch)
    run_contract(all_contracts()["RELAY-002"], sglang_engine, profile="ci")


def test_check_reports_relay_002_as_known_with_corrections_passing(sglang_engine):
    from contracts.runner import run_with_ledger

    with pytest.raises(pytest.xfail.Exception, match="with the known corrections: passed") as caught:
        run_with_ledger(all_contracts()["RELAY-002"], sglang_engine)
    assert "gen_ring[slot].copy_(self.pool.req_generation)" in str(caught.value)


def test_both_corrections_compose_in_either_order(sglang_engine, monkeypatch):
    """check applies every known correction at once: RELAY-001's host ring and RELAY-002's writer generation, in
    either order, leave both branches carrying the writer's generation."""
    from contracts.adapters.sglang.corrections import host_relay_ring, writer_generation_recorded

    for order in ((host_relay_ring, writer_generation_recorded), (writer_generation_recorded, host_relay_ring)):
        with monkeypatch.context() as mp:
            for fix in order:
                fix(mp)
            for cid in ("RELAY-001", "RELAY-002"):
                run_contract(all_contracts()[cid], sglang_engine, profile="ci")


def _ring_reads_one_publish_back(mp):
    """Re-inserted: the ring is read one publish back (a lag of one step), a different cause."""
    from sglang.srt.managers import overlap_utils as ou

    mp.setattr(ou, "CONFIDENCE_RELAY_RING_LAG", 1)


def _freshness_check_without_generation(mp):
    """Re-inserted: the budget planner uses the relayed confidence whatever its generation."""
    from sglang.srt.speculative.dspark_components.dspark_planner import HostConfidenceBudgetPlanner

    def survival(self, *, lagged_confidence, lagged_generation, current_generation):
        import torch

        k = torch.cumprod(lagged_confidence.to(torch.float32), dim=1)
        return torch.where((current_generation.to(torch.int64) >= 1).view(-1, 1), k, torch.ones_like(k))

    mp.setattr(HostConfidenceBudgetPlanner, "_two_steps_prior_survival", survival)


@pytest.mark.parametrize("bug", [_ring_reads_one_publish_back, _freshness_check_without_generation],
                         ids=lambda f: f.__name__.strip("_"))
def test_the_relay_002_entry_does_not_hide_another_bug(sglang_engine, monkeypatch, bug):
    """The entry's precision: another relay bug re-inserted fails `check`'s run of RELAY-002, either on a field the
    entry does not name or because the run with every known correction still fails."""
    from contracts.runner import run_with_ledger

    bug(monkeypatch)
    with pytest.raises(ContractViolation):
        run_with_ledger(all_contracts()["RELAY-002"], sglang_engine)


# ---- the ring branch on the repo's stream model ----------------------------------------------------------------------


def _model(*stalls):
    from contracts.streams import Schedule, StreamModel

    return StreamModel(Schedule(tuple(stalls)))


def test_on_the_eager_model_the_ring_reads_as_with_the_stand_ins():
    """The eager order is the one the stand-ins give: same reads, no race, and the ring copies went through the
    model's D2H stream (pending until the next host action)."""
    for case, options in ((REUSE_CASE, {}), (PD_CASE, {"pd_prealloc": {2: 2}})):
        model = _model()
        on_model = _engine(**options).run_confidence_relay_on(case, model)
        assert [(r.rids, r.survival) for r in on_model] == \
            [(r.rids, r.survival) for r in _engine(**options).run_confidence_relay(case)]
        assert model.violations == []
        assert sum(a.startswith("copy 'conf_ring[") for a in model.actions) == len(case.steps)


def test_a_stalled_ring_copy_is_pending():
    """Holding the D2H stream back: `resolve` finds the slot's copy_done not yet complete and skips the budget (SGLang
    does not wait), and the next publish's scatter races the pending copy that reads confidence_buf. Both are what
    the stand-ins (copies done at once) hide; neither is triaged yet, so STREAM-001 is not declared on the pack."""
    from contracts.streams import Stall

    model = _model(Stall(start=5, length=20, streams=1))
    reads = _engine().run_confidence_relay_on(REUSE_CASE, model)
    assert all(r.survival is None for r in reads)  # never resolved while the copies were held
    kinds = {v.kind for v in model.violations}
    assert kinds == {"unordered-access"}
    assert "scatter into confidence_buf" in str(model.violations[0]) and "conf_ring[" in str(model.violations[0])


def test_the_pack_runs_relay_002_on_the_eager_model(sglang_engine, monkeypatch):
    from contracts.adapters.sglang import relay_ring_model
    from contracts.strategies.relay import PREALLOC_CASE

    entered = []
    real = relay_ring_model.ring_branch_on

    def spy(model):
        entered.append(model)
        return real(model)

    monkeypatch.setattr(relay_ring_model, "ring_branch_on", spy)
    sglang_engine.run_confidence_relay(PREALLOC_CASE)
    assert len(entered) == 1 and entered[0].schedule.stalls == () and entered[0].violations == []
