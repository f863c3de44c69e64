"""The vllm-dspark contracts at the pack's shares, and at full budget nightly.

vLLM's V2 kernels run in Triton's interpreter here, one program instance after another: a verified row costs 16-24 ms
of CPU, so `dspark-contracts check` at the full budgets runs for hours. The pack runs a share of the slow contracts'
examples and Monte-Carlo rows (contracts/adapters/vllm_dspark/shares.py), which bounds the plain
`check --engine vllm-dspark` (CI's check step) and `check --engine vllm-dspark-block` to a few minutes. Here: the
block engine's verify contracts at those shares (CI checks the chain engine only), the shares against the power table
docs/engines/vllm-dspark.md carries, and under `-m nightly` every contract with no share at all. The pack's ledger
applies as in `check`.
"""

import re
from pathlib import Path

import pytest

from contracts.adapters.vllm_dspark.shares import DRAW_SHARES
from contracts.registry import all_contracts
from contracts.runner import run_with_ledger

DOCS = Path(__file__).resolve().parents[2] / "docs" / "engines" / "vllm-dspark.md"
# The block path differs in the sampled accept; REQ-005's greedy rows go through its kernel too.
BLOCK_DEFAULT = ("VERIFY-001", "VERIFY-002", "VERIFY-007", "VERIFY-011", "REQ-005")
CASES = ("VERIFY-001", "VERIFY-002", "VERIFY-003", "VERIFY-004", "VERIFY-007", "VERIFY-008", "VERIFY-011",
         "VERIFY-013", "VERIFY-014", "VERIFY-015", "VERIFY-016", "DPPAD-001", "DPPAD-002", "DRAFT-001", "DRAFT-002",
         "REQ-005")
MONTE_CARLO = ("LOSSLESS-003", "LOSSLESS-004", "LOSSLESS-005", "LOSSLESS-006")


@pytest.fixture(scope="module")
def block_engine(vllm_dspark_engine):
    from contracts.engines import load_engine

    return load_engine("contracts.adapters.vllm_dspark:VLLMDSparkBlockAdapter")


@pytest.fixture
def full_budget(monkeypatch):
    """The engine with no share: every example of the profile and every Monte-Carlo row."""
    def unshared(engine):
        monkeypatch.setattr(engine, "example_shares", {})
        monkeypatch.setattr(engine, "draw_shares", {})
        return engine
    return unshared


def test_every_draw_share_has_its_measured_power_in_the_docs():
    """A share changed without re-measuring its false-alarm rate and power fails here."""
    listed = dict(re.findall(r"^\| (LOSSLESS-\d{3}) \| ([0-9.]+) \|", DOCS.read_text(), re.M))
    assert {cid: float(s) for cid, s in listed.items()} == DRAW_SHARES


@pytest.mark.parametrize("contract_id", BLOCK_DEFAULT)
def test_block_contract_at_the_packs_shares(block_engine, contract_id):
    run_with_ledger(all_contracts()[contract_id], block_engine)


@pytest.mark.nightly
@pytest.mark.parametrize("contract_id", CASES + MONTE_CARLO)
def test_chain_contract_at_full_budget(vllm_dspark_engine, full_budget, contract_id):
    run_with_ledger(all_contracts()[contract_id], full_budget(vllm_dspark_engine))


@pytest.mark.nightly
@pytest.mark.parametrize("contract_id", BLOCK_DEFAULT + ("LOSSLESS-003", "LOSSLESS-004", "LOSSLESS-005"))
def test_block_contract_at_full_budget(block_engine, full_budget, contract_id):
    """Block verification keeps each block's law (LOSSLESS-003..005); LOSSLESS-006 states chain sampling's own
    per-position laws, which block verification does not follow (the block class does not declare
    verify.chain-sampling, so it is skipped there)."""
    run_with_ledger(all_contracts()[contract_id], full_budget(block_engine))
