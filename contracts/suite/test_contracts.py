"""Every registered contract, run against the engine chosen with --engine."""

import pytest

from contracts.machine import shared_runs
from contracts.registry import all_contracts
from contracts.report import HARDENING
from contracts.runner import run_with_ledger

CONTRACTS = all_contracts()


def _param(contract):
    marks = [pytest.mark.contract(contract.id)] + [getattr(pytest.mark, m) for m in contract.marks]
    return pytest.param(contract.id, marks=marks, id=contract.id)


@pytest.mark.parametrize("contract_id", [_param(c) for c in CONTRACTS.values()])
def test_contract(contract_id, engine, request, machine_runs):
    # Hardening: on this engine the contract's inputs are ones its own producers never emit (the pack says why).
    why = getattr(engine, "hardening", {}).get(contract_id)
    if why is not None:
        request.node.user_properties.append(("dspark_hardening", why))
        if not request.config.getoption("hardening"):
            pytest.skip(f"{HARDENING}: {why} (run with --hardening)")
    with shared_runs(machine_runs):
        run_with_ledger(CONTRACTS[contract_id], engine)
