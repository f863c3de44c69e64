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
    known = ledger.entries(engine.name, engine.version, contract_id)
    if not known:
        run_contract(CONTRACTS[contract_id], engine)
        return
    try:
        run_contract(CONTRACTS[contract_id], engine)
    except ContractViolation as violation:
        entry = ledger.match(known, violation)
        if entry is None:  # a failure the ledger does not describe is a failure
            raise
        pytest.xfail(f"known failure ({entry.reason}): {str(violation).splitlines()[0]}")
    reasons = "; ".join(e.reason for e in known)
    pytest.fail(f"{contract_id} passes on {engine.name} {engine.version} but is in the known-failures ledger: "
                f"remove the entry ({reasons})")
