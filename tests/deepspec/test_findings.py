"""What the contracts find in unmodified DeepSpec (commit afdfa7c9), each shown to be DeepSpec's and not the harness's.

For every ledger entry with a finding: the contract fails at the check's settings on the ledger's field, and the
minimal in-process correction of DeepSpec's own function makes the whole contract pass. Runs only where DeepSpec and
transformers 5.10.2 are importable.
"""

import pytest

from contracts import ledger
from contracts.adapters.deepspec import env as deepspec_env
from contracts.adapters.deepspec.corrections import correct_loop_bound
from contracts.boundary.engine import EngineSpec, RequestSpec
from contracts.registry import all_contracts
from contracts.runner import run_contract, violation_of

pytestmark = pytest.mark.skipif(deepspec_env.deepspec_unavailable_reason() is not None,
                                reason=str(deepspec_env.deepspec_unavailable_reason()))

FINDINGS = [
    # (contract, correction); both are decode-loop machine contracts (no case: the step program is the shrunk case)
    ("LOOP-002", correct_loop_bound),
    ("LOOP-004", correct_loop_bound),
]


@pytest.mark.parametrize("contract_id, correct", FINDINGS, ids=[f[0] for f in FINDINGS])
def test_finding_is_deepspecs(deepspec_engine, contract_id, correct):
    contract = all_contracts()[contract_id]
    known = ledger.engine_entries(deepspec_engine, contract_id)
    assert known, f"{contract_id} on deepspec: a finding without a ledger entry"
    violation = violation_of(contract, deepspec_engine)
    assert ledger.match(known, violation) is not None, str(violation)
    with pytest.MonkeyPatch.context() as mp:
        correct(mp)
        run_contract(contract, deepspec_engine, profile="ci")  # the whole contract at the check's settings


def test_the_round_past_max_new_tokens_directly(deepspec_engine):
    """The root cause on its own, through the step level: a request of max_new_tokens 1 gets a whole speculative
    round that emits nothing; corrected, it finishes at admission."""
    spec = EngineSpec(vocab_size=5, gamma=3, drafter="vanilla")
    request = RequestSpec(0, (1, 2), 0.0, 1)

    def run():
        handle = deepspec_engine.new_engine(spec)
        deepspec_engine.add_requests(handle, [request], "local")
        live_at_admission = deepspec_engine.request_views(handle)[0].live
        steps = []
        while any(v.live for v in deepspec_engine.request_views(handle)):
            steps.append(deepspec_engine.step(handle).emitted[0])
        return live_at_admission, steps, deepspec_engine.request_views(handle)[0].output

    live, steps, output = run()
    assert live and steps == [[]] and len(output) == 1
    with pytest.MonkeyPatch.context() as mp:
        correct_loop_bound(mp)
        live, steps, fixed_output = run()
    assert not live and steps == [] and fixed_output == output


def test_every_deepspec_ledger_finding_has_a_correction_test(deepspec_engine):
    listed = {e.contract_id for e in deepspec_engine.known_failures if e.finding is not None}
    assert listed == {cid for cid, _ in FINDINGS}


def test_the_known_finding_does_not_blind_loop_002(deepspec_engine):
    """LOOP-002 fails as the ledger knows; with a second bug re-inserted beside it (the target cache not rolled
    back), `check` reports a failure, not the known one."""
    from contracts.runner import run_with_ledger
    from contracts.violation import ContractViolation
    from tests.deepspec.test_reinserted_bugs import _target_cache_not_rolled_back

    contract = all_contracts()["LOOP-002"]
    with pytest.MonkeyPatch.context() as mp:
        _target_cache_not_rolled_back(mp)
        with pytest.raises(ContractViolation):
            run_with_ledger(contract, deepspec_engine)


def test_version_is_the_commit(deepspec_engine):
    from contracts.engines import version_line

    assert deepspec_engine.version == deepspec_env.DEEPSPEC_COMMIT
    assert version_line(deepspec_engine) == f"engine deepspec {deepspec_env.DEEPSPEC_COMMIT}"
