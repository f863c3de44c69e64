"""Confidence relay contracts (SGLang 0.5.23 G4): which confidence a step's verify budget may read.

The budget of a ragged-verify step is planned from draft confidence relayed from earlier steps (through the
FutureMap under overlap scheduling, through the planner's own carry without). Rows are reused by new requests,
so what a row holds may be a previous occupant's; a request that just joined (a local prefill or a PD handoff)
has no history. Expectations come from the case alone: who was in which step, and what each drafted.
"""

from __future__ import annotations

from contracts import oracle
from contracts.checks import expect
from contracts.protocol import RELAY, RELAY_PREALLOC
from contracts.registry import contract
from contracts.strategies.relay import PREALLOC_CASE, REUSE_CASE, prealloc_relay_cases, relay_cases
from contracts.violation import Mismatch

TOL = 1e-6  # engines relay confidence in float32; the case's values are exact there


@contract("RELAY-001", "a step's verify budget reads, per row, the survival (running product) of the confidence that "
          "row's current request drafted exactly `lag` steps earlier (the engine's relay lag), and 1s where that request "
          "has none (it joined later, or the row was another request's then: a reused row never lends its previous "
          "occupant's history); a step may go without a budget only while fewer than `lag` steps have run",
          requires={RELAY}, cases=relay_cases, examples=(REUSE_CASE,))
def budget_reads_own_lagged_confidence(engine, case):
    expect_own_lagged_reads(case, engine.run_confidence_relay(case), engine.confidence_relay_lag)


@contract("RELAY-002", "RELAY-001 holds when requests take their rows up to 3 steps before they join (a PD decode "
          "server allocates a request's row when its KV transfer starts, while the running batch keeps decoding and "
          "publishing): a row taken early lends its request neither its previous occupant's history nor never-written "
          "values, and the request reads 1s until it has drafted `lag` steps",
          requires={RELAY, RELAY_PREALLOC}, cases=prealloc_relay_cases, examples=(PREALLOC_CASE,))
def prealloc_row_lends_no_history(engine, case):
    expect_own_lagged_reads(case, engine.run_confidence_relay(case), engine.confidence_relay_lag)


def expect_own_lagged_reads(case, reads, lag: int) -> None:
    """RELAY-001's expectation of what each step's budget read (also what the relay must read under any schedule).
    A request whose row was already its own `lag` steps back, though it had not joined then (RelayStep.prealloc), is
    named so in the field: that read is RELAY-002's."""
    batches, taken = case.batches(), case.taken()
    expect(len(reads) == len(batches), "steps reported", len(batches), len(reads))
    for s, (rids, read) in enumerate(zip(batches, reads)):
        expect(tuple(read.rids) == rids, f"step {s}: rows", rids, read.rids)
        if read.survival is None:
            expect(s < lag, f"step {s}: budget", f"a budget (lag {lag}: steps from {lag} on have resolved history)",
                   "none (verify-all)")
            continue
        before = set(batches[s - lag]) if s >= lag else set()
        for i, rid in enumerate(rids):
            want = oracle.survival(case.confidence(rid, s - lag)) if rid in before else [1.0] * case.gamma
            got = list(read.survival[i])
            if len(got) != len(want) or any(not abs(a - b) <= TOL for a, b in zip(got, want)):  # NaN read fails
                if rid in before:
                    why = f"the running product of its own confidence from step {s - lag}"
                elif s < lag:
                    why = f"1s: nothing was drafted {lag} steps before step {s}"
                else:
                    why = f"1s: it joined at step {_joined(case, rid)}, after step {s - lag}"
                early = rid not in before and s >= lag and taken[rid] <= s - lag
                field = f"step {s}: survival the budget read for request {rid}" + (
                    f" (its row taken at step {taken[rid]}, before it joined at step {_joined(case, rid)})" if early else "")
                raise Mismatch(field, f"{want} ({why})", got)


def _joined(case, rid) -> int:
    return next(s for s, step in enumerate(case.steps) if rid in step.join)
