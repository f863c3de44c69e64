"""Every registered contract, run against the engine chosen with --engine."""

import pytest

from contracts.registry import all_contracts
from contracts.runner import run_with_ledger

CONTRACTS = all_contracts()


def _param(contract):
    marks = [pytest.mark.contract(contract.id)] + [getattr(pytest.mark, m) for m in contract.marks]
    return pytest.param(contract.id, marks=marks, id=contract.id)


@pytest.mark.parametrize("contract_id", [_param(c) for c in CONTRACTS.values()])
def test_contract(contract_id, engine):
    run_with_ledger(CONTRACTS[contract_id], engine)
