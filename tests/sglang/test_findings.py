"""What the contracts find in unmodified SGLang 0.5.23, each shown to be SGLang's and not the harness's.

For every known-failures ledger entry on sglang: the contract fails on the shrunk case with the ledger's field,
and a minimal local correction of SGLang's own function, applied in-process, makes the contract pass at the
settings `dspark-contracts check` uses. Runs only where sglang 0.5.23 is installed.
"""

import pytest

from contracts import ledger
from contracts.adapters.sglang import env as sglang_env
from contracts.adapters.sglang.corrections import forced_fraction_skips_verify_all_cache, row_widened_for_dflash
from contracts.boundary.engine import EngineSpec, PlanCase
from contracts.boundary.verify import VerifyCase
from contracts.registry import all_contracts
from contracts.runner import _call as check_case  # one case, failures as ContractViolation
from contracts.runner import run_contract
from contracts.strategies.kv import KvPlan
from contracts.violation import ContractViolation

pytestmark = pytest.mark.skipif(sglang_env.sglang_unavailable_reason() is not None,
                                reason=str(sglang_env.sglang_unavailable_reason()))


@pytest.fixture(scope="module")
def engines(sglang_engine, sglang_chain_engine):
    return {"sglang": sglang_engine, "sglang-chain": sglang_chain_engine}






def _candidates_refused_out_of_range(mp):
    """accept_draft_tokens refuses a draft id outside [0, V) with a ValueError naming the candidates."""
    from sglang.srt.speculative.dspark_components import dspark_verify

    real = dspark_verify.accept_draft_tokens

    def accept(*, candidates, target_logits, **kw):
        bad = (candidates < 0) | (candidates >= target_logits.shape[-1])
        if bool(bad.any()):
            raise ValueError(f"candidates: ids outside [0, {target_logits.shape[-1]})")
        return real(candidates=candidates, target_logits=target_logits, **kw)

    mp.setattr(dspark_verify, "accept_draft_tokens", accept)


INVALID_DRAFT = VerifyCase(bs=1, gamma=2, vocab=2, target_family="sparse", draft_family="sparse", draft_mode="sampled",
                           seed=0)

FINDINGS = [
    # (contract, shrunk case, correction)
    # Admissible: prompt 41 is SGLang's longest at context 48 (max_req_input_len 42), 5 new tokens its grant.
    ("KV-002", KvPlan(gamma=8, page_choice=0, context_len=48, requests=((True, 0.0, 0),), commits=((1,),) * 4),
     row_widened_for_dflash),
    ("PLAN-010", PlanCase(confidence=((0.0,),), verify_mode="compact", sps=None, force_budget_frac=0.25, capture_bs=None),
     forced_fraction_skips_verify_all_cache),
    ("VERIFY-012", INVALID_DRAFT, _candidates_refused_out_of_range),
]
ENGINES = {"VERIFY-012": ("sglang", "sglang-chain")}


CASES = [(cid, engine, case, correct) for cid, case, correct in FINDINGS for engine in ENGINES.get(cid, ("sglang",))]


@pytest.mark.parametrize("contract_id, engine_name, case, correct", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_finding_is_sglangs(engines, contract_id, engine_name, case, correct):
    engine, contract = engines[engine_name], all_contracts()[contract_id]
    known = ledger.engine_entries(engine, contract_id)
    assert known, f"{contract_id} on {engine_name}: a finding without a ledger entry"
    with pytest.raises(ContractViolation) as caught:
        run_contract(contract, engine, profile="ci")
    assert ledger.match(known, caught.value) is not None, str(caught.value)
    with pytest.raises(ContractViolation) as shrunk:
        check_case(contract, engine, case)  # the shrunk case fails as it stands, on the ledger's field
    assert ledger.match(known, shrunk.value) is not None, str(shrunk.value)
    with pytest.MonkeyPatch.context() as mp:
        correct(mp)
        contract.check(engine, case)
        run_contract(contract, engine, profile="ci")  # the whole contract at the check's settings


def test_every_sglang_ledger_entry_has_a_correction_test():
    from contracts.adapters.sglang import SGLangAdapter

    # A rule SGLang does not follow on purpose (by_design) is no finding, so it has nothing to correct.
    listed = {(e.engine, e.contract_id) for e in SGLangAdapter.known_failures if e.contract_id not in SGLangAdapter.by_design}
    elsewhere = {("sglang", "RELAY-001")}  # tests/sglang/test_relay_finding.py: a scenario, not a shrunk case table
    elsewhere.add(("sglang", "RELAY-002"))  # tests/sglang/test_cuda_relay_path.py: the ring's PD decode cases
    # tests/sglang/test_request_findings.py: the whole-request contracts, REQ-002 with two causes
    elsewhere |= {(engine, cid) for engine, cid in listed if cid.startswith("REQ-")}
    elsewhere.add(("sglang", "LOOP-003"))  # below: a decode-loop program, not a case
    assert listed == {(engine, cid) for cid, engine, _, _ in CASES} | elsewhere


def test_the_cpu_bounds_guard_keeps_later_rows_reading_their_own_slots():
    """The guard that stands in for a column bound (the GPU kernel has none) must not move other rows' slots: the
    kernel finds a row's slots at sum(end - start) of the rows before it, so a row whose reservation starts past its
    width (a KV-002 overrun one step earlier) is clipped to zero length, not to a negative one. Found as a flaky KV-003
    in CI: the next request read out_cache_loc[-1]."""
    import torch

    from contracts.adapters.sglang.runtime import cpu_kernels, runtime

    runtime()  # SGLang's CPU import setup
    from sglang.srt.mem_cache import allocation

    width = 4
    r2t = torch.zeros((3, width), dtype=torch.int32)
    with cpu_kernels():  # row 1 asks for columns 5..6 of a 4-wide row, row 2 for columns 0..1
        allocation.assign_req_to_token_pool_func(torch.tensor([1, 2]), r2t, torch.tensor([5, 0]), torch.tensor([6, 2]),
                                                 torch.tensor([91, 21, 22]), 2)
    assert r2t[1].tolist() == [0] * width and r2t[2].tolist() == [21, 22, 0, 0]


# PLAN-010's cause in the decode loop: SGLang's own Scheduler, compact mode without an SPS table, a fraction forced
# through set_internal_state (LOOP-003's shrunk program: two greedy requests, one step).
PLAN_010_LOOP = EngineSpec(vocab_size=8, gamma=8, drafter="vanilla", verify_mode="compact", force_budget_frac=0.5,
                           sps=None, min_verify_len=0, seed=0, model_seed=1, capture_bs=(1, 2, 4, 8))


def test_loop_003_meets_plan_010_in_the_decode_loop(sglang_engine):
    """LOOP-003 fails on the ledger's field over programs on the shrunk configuration, and passes there with PLAN-010's
    correction (`check` itself re-runs the whole contract with every correction applied)."""
    from hypothesis import strategies as st

    from contracts.machine import run_decode_loop, seeded
    from contracts.violation import Mismatch

    known = ledger.engine_entries(sglang_engine, "LOOP-003")
    assert known, "LOOP-003 on sglang: a finding without a ledger entry"
    small = {"specs": st.just(PLAN_010_LOOP), "max_examples": 10, "steps": 3}
    with pytest.raises(Mismatch) as caught, seeded(20261206):  # the same programs under any profile
        run_decode_loop(sglang_engine, ("planner",), **small)
    violation = ContractViolation("LOOP-003", "sglang", "", caught.value.what, caught.value.expected, caught.value.observed)
    assert ledger.match(known, violation) is not None, str(violation)
    with pytest.MonkeyPatch.context() as mp:
        forced_fraction_skips_verify_all_cache(mp)
        with seeded(20261206):
            run_decode_loop(sglang_engine, ("planner",), **small)
