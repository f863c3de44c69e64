"""LOOP-001..004 in the contract suite share one machine run that checks all four families (contracts.machine's
`shared_runs`): after it passes, the other three run nothing; outside the suite, or with the ledger's corrections
applied, each runs its own; and a family that fails the shared run still fails its own contract, through the
contract's own assertion, at the check's settings."""

import pytest

from contracts import machine
from contracts.adapters.reference import ReferenceAdapter
from contracts.registry import all_contracts
from contracts.runner import violation_of
from tests.caught import assert_caught
from tests.property.mutants import all_mutants

pytestmark = pytest.mark.cpu


class Counting(ReferenceAdapter):
    def __init__(self):
        super().__init__()
        self.engines = 0

    def new_engine(self, spec):
        self.engines += 1
        return super().new_engine(spec)


def _engines_built(engine, families, **small) -> int:
    before = engine.engines
    machine.run_decode_loop(engine, families, **small)
    return engine.engines - before


def test_families_only_gate_checks_so_every_family_sees_the_same_programs():
    """What the sharing rests on: from one seed the machine draws the same programs whichever families it checks
    (seeded, so that this holds under the randomized `dev` profile as under CI's derandomized one)."""
    small = {"max_examples": 8, "steps": 4}
    engine, logs = Counting(), []
    for families in (("greedy",), ("progress",), machine.FAMILIES):
        log = []
        engine.add_requests = lambda h, reqs, via, _log=log, _add=ReferenceAdapter.add_requests.__get__(engine): (
            _log.append((tuple(reqs), via)), _add(h, reqs, via))[1]
        with machine.seeded(20261203):
            machine.run_decode_loop(engine, families, **small)
        logs.append(log)
    assert logs[0] and logs[0] == logs[1] == logs[2]


def test_after_a_passing_run_of_every_family_the_others_run_nothing():
    small = {"max_examples": 8, "steps": 4}
    engine, memo = Counting(), {}
    with machine.shared_runs(memo):
        assert _engines_built(engine, ("greedy",), **small) > 0
        assert list(memo.values()) == [True]
        assert _engines_built(engine, ("bookkeeping",), **small) == 0
        assert _engines_built(engine, ("planner", "progress"), **small) == 0
        assert _engines_built(engine, ("greedy",), max_examples=6, steps=4) > 0, "another budget is another run"
    assert _engines_built(engine, ("bookkeeping",), **small) > 0, "outside the suite each contract runs its own"
    with machine.shared_runs(memo), machine.shared_runs(None):  # as under the ledger's corrections
        assert _engines_built(engine, ("bookkeeping",), **small) > 0


def test_a_family_the_shared_run_fails_fails_its_own_contract():
    """The progress mutant: the shared run fails, and LOOP-004 reruns its own family and is caught as the negative
    controls catch it without the sharing."""
    mutant = next(m for m in all_mutants() if m.name == "rejected-step-emits-nothing")
    contract, engine, memo = all_contracts()["LOOP-004"], ReferenceAdapter(), {}
    with machine.shared_runs(memo), mutant.active():
        violation = violation_of(contract, engine)
    assert list(memo.values()) == [False]
    assert_caught(violation, contract, engine)


def test_a_family_the_ledger_lists_runs_alone_and_the_others_still_share():
    """An engine whose ledger lists LOOP-003 (SGLang: the compact planner ignores a forced fraction) would fail the
    shared run every time: the planner family runs on its own, the other three still share one run."""
    from contracts.ledger import KnownFailure

    small = {"max_examples": 8, "steps": 4}
    engine, memo = Counting(), {}
    engine.known_failures = (KnownFailure("reference", "==" + engine.version, "LOOP-003", "^budget$", "evidence: test"),)
    assert machine.unlisted_families(engine) == ("greedy", "bookkeeping", "progress")
    with machine.shared_runs(memo):
        assert _engines_built(engine, ("greedy",), **small) > 0
        assert list(memo.values()) == [True]
        assert _engines_built(engine, ("progress",), **small) == 0
        assert _engines_built(engine, ("planner",), **small) > 0, "the listed family runs its own"
