"""Every contract is shown to catch a broken reference engine, exactly as `dspark-contracts check` runs it.

Each mutant must fail its contract under the `ci` profile, with the contract's own example budget and its
pinned examples (the settings the check command uses, not a bigger budget), through the contract's own
assertion (a Mismatch of its checks, not an exception from the engine), and with a counterexample that
passes on the intact engine. A `nightly` run repeats each case over several random seeds and reports the
detection rate per contract; anything below 100% is a defect. A contract that no mutant can fail is a
defect too, so the registry and the mutant table are checked against each other.
"""

import pytest

from contracts import machine
from contracts.adapters.reference import ReferenceAdapter
from contracts.registry import all_contracts
from contracts.runner import violation_of
from contracts.violation import ContractViolation, is_engine_crash
from dspark.engine import DSparkEngine
from tests.caught import assert_caught
from tests.property.mutants import Mutant, all_mutants

CONTRACTS = all_contracts()
MUTANTS = all_mutants()
CASES = [pytest.param(m, cid, id=f"{cid}-{m.name}") for m in MUTANTS for cid in m.catches]
NIGHTLY_SEEDS = (1, 2, 3, 4, 5)


def test_every_contract_has_a_negative_control():
    caught = {cid for m in MUTANTS for cid in m.catches}
    assert set(CONTRACTS) - caught == set(), "contracts without a mutant that fails them"
    assert caught - set(CONTRACTS) == set(), "mutants naming unknown contracts"


def _violation(mutant, contract, engine, **settings):
    # A nondeterministic mutant (e.g. unseeded noise) can pass on a replay during shrinking (FlakyFailure);
    # the failure it did produce must still be this contract's violation.
    with mutant.active():
        return violation_of(contract, engine, **settings)


def _check_caught(violation, contract, engine):
    assert "expected" in str(violation)
    assert_caught(violation, contract, engine)  # outside mutant.active(): the counterexample passes on the intact engine


def test_a_mutant_that_only_breaks_itself_is_not_a_control():
    """Today's stale mutant: `_publish` gained an argument, the patch did not, and the TypeError it raised in the
    pinned program read as a catch. Leaving the patch fails, and a catch-all field is refused as a catch."""
    def stale_publish(self, new_seq_lens, bonus):
        raise AssertionError("never reached: the engine passes three arguments")

    stale = Mutant("stale-publish", ("LOOP-002",), lambda mp: mp.setattr(DSparkEngine, "_publish", stale_publish))
    contract, engine = CONTRACTS["LOOP-002"], ReferenceAdapter()
    with pytest.raises(AssertionError, match="the patch itself raised TypeError"):
        _violation(stale, contract, engine)
    crash = ContractViolation("LOOP-002", engine.name, "statement", "engine call in the pinned program", "no exception",
                              "TypeError: ...", repro=f"--engine {engine.name}")
    with pytest.raises(AssertionError, match="caught by an engine exception"):
        assert_caught(crash, contract, engine)


class _Silent(ReferenceAdapter):
    """The reference adapter, but one report comes back empty: a contract must not read no data as a pass."""

    def __init__(self, method):
        super().__init__()
        self._empty = method

    def run_kv_steps(self, case):
        return () if self._empty == "run_kv_steps" else super().run_kv_steps(case)

    def step_laws(self, handle):
        return [] if self._empty == "step_laws" else super().step_laws(handle)

    def draft_draws(self, handle):
        return [] if self._empty == "draft_draws" else super().draft_draws(handle)


@pytest.mark.parametrize("contract_id, method, field", [
    *((f"KV-00{i}", "run_kv_steps", "decode steps reported") for i in range(1, 5)),
    ("LOOP-006", "step_laws", "requests whose sampling laws the step reports"),
    ("DIST-002", "draft_draws", "requests whose drafts the step reports"),
])
def test_an_empty_report_fails_the_contract(contract_id, method, field):
    contract = CONTRACTS[contract_id]
    violation = violation_of(contract, _Silent(method))
    assert field in violation.what, violation
    assert not is_engine_crash(violation.what)
    # The full report passes on the same case (a fixed scenario: the whole contract).
    contract.check(ReferenceAdapter(), *(() if contract.cases is None else (violation.case,)))


@pytest.mark.parametrize("mutant, contract_id", CASES)
def test_mutant_is_caught_at_the_check_settings(mutant, contract_id):
    contract, engine = CONTRACTS[contract_id], ReferenceAdapter()
    _check_caught(_violation(mutant, contract, engine), contract, engine)


@pytest.mark.nightly
def test_detection_rate_over_seeds(capsys):
    """Each (mutant, contract) over NIGHTLY_SEEDS random seeds at the check's budget; every one must be caught."""
    engine, rates, missed = ReferenceAdapter(), {}, []
    for m in MUTANTS:
        for cid in m.catches:
            contract = CONTRACTS[cid]
            hits, runs = 0, 0
            for seed in NIGHTLY_SEEDS:
                # A contract with cases takes the seed through Hypothesis' settings; a machine contract through
                # machine.seeded; a fixed scenario (fixed seeds of its own) runs once.
                extra = {} if contract.cases is None else {"derandomize": False, "seed": seed}
                with machine.seeded(seed) as machine_runs:
                    try:
                        _check_caught(_violation(m, contract, engine, **extra), contract, engine)
                        hits += 1
                    except (AssertionError, pytest.fail.Exception):
                        missed.append(f"{cid}-{m.name} seed {seed}")
                runs += 1
                if contract.cases is None and not machine_runs:
                    break
            rates[f"{cid}-{m.name}"] = hits / runs
    with capsys.disabled():
        print("\ndetection rate per (contract, mutant):")
        for key, rate in sorted(rates.items()):
            print(f"  {rate:6.0%}  {key}")
    assert not missed, f"missed at the check's settings: {missed}"
