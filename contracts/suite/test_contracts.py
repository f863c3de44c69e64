"""Every registered contract, run against the engine chosen with --engine."""

import pytest

from contracts import ledger
from contracts.registry import all_contracts
from contracts.runner import run_contract
from contracts.violation import ContractViolation

CONTRACTS = all_contracts()


def _param(contract):
    marks = [pytest.mark.contract(contract.id)] + [getattr(pytest.mark, m) for m in contract.marks]
    return pytest.param(contract.id, marks=marks, id=contract.id)


@pytest.mark.parametrize("contract_id", [_param(c) for c in CONTRACTS.values()])
def test_contract(contract_id, engine):
    known = ledger.lookup(engine.name, contract_id)
    if known is None:
        run_contract(CONTRACTS[contract_id], engine)
        return
    try:
        run_contract(CONTRACTS[contract_id], engine)
    except ContractViolation as violation:
        pytest.xfail(f"known failure ({known.reason}): {str(violation).splitlines()[0]}")
    pytest.fail(f"{contract_id} passes on {engine.name} but is in the known-failures ledger: remove the entry ({known.reason})")
