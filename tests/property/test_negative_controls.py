"""Every contract is shown to catch a broken reference engine, with a shrunk counterexample.

A contract that no mutant can fail is a defect, so the registry and the mutant
table are checked against each other too.
"""

import pytest
from hypothesis import Phase
from hypothesis.errors import FlakyFailure

from contracts.adapters.reference import ReferenceAdapter
from contracts.registry import all_contracts
from contracts.runner import run_contract
from contracts.violation import ContractViolation
from tests.property.mutants import all_mutants

CONTRACTS = all_contracts()
MUTANTS = all_mutants()
CASES = [pytest.param(m, cid, id=f"{cid}-{m.name}") for m in MUTANTS for cid in m.catches]


def test_every_contract_has_a_negative_control():
    caught = {cid for m in MUTANTS for cid in m.catches}
    assert set(CONTRACTS) - caught == set(), "contracts without a mutant that fails them"
    assert caught - set(CONTRACTS) == set(), "mutants naming unknown contracts"


@pytest.mark.parametrize("mutant, contract_id", CASES)
def test_mutant_is_caught(mutant, contract_id):
    contract, engine = CONTRACTS[contract_id], ReferenceAdapter()
    with mutant.active(), pytest.raises((ContractViolation, FlakyFailure)) as caught:
        # Pinned @examples are left out: the strategy itself must find the bug, then shrink it.
        run_contract(contract, engine, derandomize=True, database=None, max_examples=200,
                     phases=[Phase.generate, Phase.shrink])
    violation = caught.value
    if isinstance(violation, FlakyFailure):
        # A nondeterministic mutant (e.g. unseeded noise) can pass on a replay during shrinking;
        # the failure it did produce must still be this contract's violation.
        violation = next(e for e in violation.exceptions if isinstance(e, ContractViolation))
    assert violation.contract_id == contract_id and violation.engine == "reference"
    assert violation.repro and "expected" in str(violation)
    if contract.cases is not None:
        # The shrunk counterexample passes on the intact engine: the failure is the mutant's.
        assert violation.case is not None
        contract.check(engine, violation.case)
