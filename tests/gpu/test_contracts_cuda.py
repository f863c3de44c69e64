"""The contract suite on CUDA: every registered contract on the reference adapter with its verify level on the GPU
through the compiled Triton kernels (`ReferenceAdapter(device="cuda", backend="triton")`), the known-failures
ledger applied as in `dspark-contracts check`. The other levels run on the CPU, as in the CPU suite.

Marked `gpu` (so also `b300`): `pytest -m b300` runs it, and without CUDA every case is reported skipped.
The same run as a table: `dspark-contracts check --device cuda --backend triton` (what scripts/gpu_check.sh runs).
A failure's repro line carries DSPARK_DEVICE=cuda DSPARK_BACKEND=triton, so it replays on the GPU.
"""

import pytest

from contracts.registry import all_contracts
from contracts.runner import run_with_ledger

CONTRACTS = all_contracts()
pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_engine():
    from contracts.adapters.reference import ReferenceAdapter
    from contracts.validation import validate_adapter

    engine = ReferenceAdapter(device="cuda", backend="triton")  # refuses interpreted kernels or a missing GPU
    validate_adapter(engine)
    engine.engine_spec = "reference"
    return engine


@pytest.mark.parametrize("contract_id", [pytest.param(c.id, marks=[getattr(pytest.mark, m) for m in c.marks], id=c.id)
                                         for c in CONTRACTS.values()])
def test_contract_on_cuda(contract_id, cuda_engine):
    run_with_ledger(CONTRACTS[contract_id], cuda_engine)
