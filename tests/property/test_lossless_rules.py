"""Losslessness is not chain sampling: a lossless rule that decides the block jointly (block verification)
passes the losslessness contracts and fails only the one that pins chain sampling's laws, at the check's
settings and through that contract's own assertion."""

import pytest

from contracts.adapters.reference import ReferenceAdapter
from contracts.registry import all_contracts
from contracts.runner import run_contract
from contracts.violation import ContractViolation
from dspark.verify import reference
from tests.property.rules.block_verification import block_verification_accept

CONTRACTS = all_contracts()


@pytest.fixture
def block_verification(monkeypatch):
    monkeypatch.setattr(reference, "sampling_accept", block_verification_accept)


@pytest.mark.parametrize("cid", ["LOSSLESS-003", "LOSSLESS-004", "LOSSLESS-005"])
def test_block_verification_is_lossless(block_verification, cid):
    run_contract(CONTRACTS[cid], ReferenceAdapter(), profile="ci")


def test_block_verification_is_not_chain_sampling(block_verification):
    with pytest.raises(ContractViolation) as caught:
        run_contract(CONTRACTS["LOSSLESS-006"], ReferenceAdapter(), profile="ci")
    assert caught.value.contract_id == "LOSSLESS-006" and "emitted block goodness of fit" in caught.value.what
