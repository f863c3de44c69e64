"""The vllm-dspark contracts at the budget interpreted Triton allows, and at full budget nightly.

vLLM's V2 kernels run in Triton's interpreter here: one verify call of a 13-row, 8-column batch takes 1-4 s, so
`dspark-contracts check` at the ci profile's 100 examples per contract runs for hours. The default run takes the greedy,
bounds, bookkeeping, repeatability and law contracts at a few examples each (the derandomized ci profile, capped by
`max_examples`); `-m nightly` runs the Monte-Carlo losslessness contracts at their full row counts (tens of thousands
of rows each; hours interpreted, seconds on a GPU: scripts/gpu_check.sh). The pack's ledger applies as in `check`.
"""

import pytest

from contracts.registry import all_contracts
from contracts.runner import run_contract, run_with_ledger

FEW = 8  # examples per contract in the default run (plus each contract's pinned examples)
# VERIFY-007 verifies a 64-row high-entropy batch 4 times per example (about 40 s interpreted): fewer examples.
# VERIFY-013, 014 and 016 verify each case 2 to 5 times (015, one fixed scenario, is in CI's check step).
EXAMPLES = {"VERIFY-007": 3, "VERIFY-013": 4, "VERIFY-014": 3, "VERIFY-016": 4}

DEFAULT = ("VERIFY-001", "VERIFY-002", "VERIFY-003", "VERIFY-004", "VERIFY-007", "VERIFY-008", "VERIFY-011",
           "VERIFY-013", "VERIFY-014", "VERIFY-016", "DPPAD-001", "DPPAD-002")
BLOCK_DEFAULT = ("VERIFY-001", "VERIFY-002", "VERIFY-007", "VERIFY-011")  # the block path differs in the sampled accept
MONTE_CARLO = ("LOSSLESS-003", "LOSSLESS-004", "LOSSLESS-005", "LOSSLESS-006")


@pytest.fixture(scope="module")
def block_engine(vllm_dspark_engine):
    from contracts.engines import load_engine

    return load_engine("contracts.adapters.vllm_dspark:VLLMDSparkBlockAdapter")


@pytest.mark.parametrize("contract_id", DEFAULT)
def test_chain_contract_at_few_examples(vllm_dspark_engine, contract_id):
    run_contract(all_contracts()[contract_id], vllm_dspark_engine, profile="ci",
                 max_examples=EXAMPLES.get(contract_id, FEW))


@pytest.mark.parametrize("contract_id", BLOCK_DEFAULT)
def test_block_contract_at_few_examples(block_engine, contract_id):
    run_contract(all_contracts()[contract_id], block_engine, profile="ci", max_examples=EXAMPLES.get(contract_id, FEW))


@pytest.mark.nightly
@pytest.mark.parametrize("contract_id", MONTE_CARLO)
def test_chain_monte_carlo_at_full_budget(vllm_dspark_engine, contract_id):
    run_with_ledger(all_contracts()[contract_id], vllm_dspark_engine)


@pytest.mark.nightly
@pytest.mark.parametrize("contract_id", ("LOSSLESS-003", "LOSSLESS-004", "LOSSLESS-005"))
def test_block_monte_carlo_at_full_budget(block_engine, contract_id):
    """Block verification keeps each block's law (LOSSLESS-003..005); LOSSLESS-006 states chain sampling's own
    per-position laws, which block verification does not follow (the block class does not declare
    verify.chain-sampling, so it is skipped there)."""
    run_with_ledger(all_contracts()[contract_id], block_engine)
