"""DSpark's Markov block sampling in vLLM's V2 speculator (`DSparkSpeculator._sample_sequential` -> `gumbel_sample`)
under DRAFT-004, through the pack's `markov_draft` (a weights-free draft model; substitutes in
contracts/adapters/vllm_dspark/draft.py). CI's `check --engine vllm-dspark` step runs the contract on the intact
speculator; here a draft drawn without its temperature, put back into the speculator's own call, fails it through the
contract's gate.
"""

import pytest

from contracts.registry import all_contracts
from contracts.runner import run_contract
from contracts.violation import ContractViolation, is_engine_crash

CONTRACT = all_contracts()["DRAFT-004"]


def test_a_draft_drawn_without_its_temperature_is_caught(vllm_dspark_engine):
    """`_sample_logits` calling gumbel_sample with apply_temperature=False draws at T = 1 while the cache (and so the
    verifier) says T: the PIT gate of a T != 1 configuration fails."""
    from vllm.v1.worker.gpu.spec_decode.dspark import speculator

    real = speculator.gumbel_sample

    def no_temperature(*args, **kwargs):
        return real(*args, **{**kwargs, "apply_temperature": False})

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(speculator, "gumbel_sample", no_temperature)
        with pytest.raises(ContractViolation) as caught:
            run_contract(CONTRACT, vllm_dspark_engine, profile="ci")
    assert not is_engine_crash(caught.value.what), str(caught.value)
    assert "PIT of the sampled drafts" in caught.value.what, str(caught.value)
    assert "vllm_dspark" in caught.value.repro or "vllm-dspark" in caught.value.repro, caught.value.repro
