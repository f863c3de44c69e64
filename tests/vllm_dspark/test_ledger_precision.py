"""Precision of vllm-dspark's known-failures ledger: the V2 microbatching entries hide no other DP padding bug.

The three entries (DPPAD-003/004/005, on both engines) record a policy divergence with no correction, so nothing
re-runs the contract behind them: each entry must match only the steps where V2's own microbatching rule gives the
observed value. Each test puts a second bug into vLLM's V2 DP code, one whose violation has the entry's field (the
field pattern alone, as first written, took it for the policy) but not V2's rule, and shows the run fails. The
unmodified engine still fails these contracts only as the ledger knows. Runs only where vllm 0.33.0 is installed;
the ranks' runs are cached per (case, vLLM's code), so the block engine reuses the chain engine's.
"""

import re
from dataclasses import replace

import pytest

from contracts.adapters.vllm_dspark import env as vllm_dspark_env
from contracts.boundary.dp import DpPaddingCase
from contracts.registry import all_contracts
from contracts.runner import _call as check_case  # one case, failures as ContractViolation
from contracts.runner import run_with_ledger
from contracts.violation import ContractViolation
from tests.caught import guarded_patches
from tests.ledger_precision import assert_the_run_fails, ci_profile  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(vllm_dspark_env.vllm_dspark_unavailable_reason() is not None,
                                reason=str(vllm_dspark_env.vllm_dspark_unavailable_reason()))


def _prefill_batches_refused_graphs(mp):
    """A rank whose batch holds a prefill (no max query length) asks for eager, so the ranks never replay a graph on
    such a step although a captured size covers them: DPPAD-003's 'replays a graph' is False where V2's rule does not
    microbatch."""
    from vllm.config import CUDAGraphMode
    from vllm.v1.worker.gpu import dp_utils

    real = dp_utils.sync_cudagraph_and_dp_padding

    def sync(cudagraph_manager, desired_batch_desc, *args, max_query_len=None, **kw):
        if max_query_len is None:
            desired_batch_desc = replace(desired_batch_desc, cg_mode=CUDAGraphMode.NONE)
        return real(cudagraph_manager, desired_batch_desc, *args, max_query_len=max_query_len, **kw)

    mp.setattr(dp_utils, "sync_cudagraph_and_dp_padding", sync)


def _microbatch_threshold_ignored(mp):
    """The DBO token thresholds dropped from the microbatching decision: a step microbatches whenever every rank
    allows it, below the threshold too (V2's rule holds the smallest rank to the threshold)."""
    from vllm.v1.worker.gpu import dp_utils

    mp.setattr(dp_utils, "check_ubatch_thresholds", lambda config, num_tokens, uniform_decode: config.use_ubatching)


def _eager_ranks_keep_their_graph_padding(mp):
    """vLLM V1's DPPAD-005 finding ported to V2: when the ranks agree on eager (no lockstep), each rank still runs the
    count its own graph dispatch padded to, not its tokens."""
    from vllm.config import CUDAGraphMode
    from vllm.v1.worker.gpu import dp_utils

    real = dp_utils.sync_cudagraph_and_dp_padding

    def sync(cudagraph_manager, desired_batch_desc, *args, **kw):
        desc, state = real(cudagraph_manager, desired_batch_desc, *args, **kw)
        if state is not None and desc.cg_mode == CUDAGraphMode.NONE and int(desc.num_ubatches) <= 1:
            desc = replace(desc, num_tokens=max(int(desc.num_tokens), int(desired_batch_desc.num_tokens)))
        return desc, state

    mp.setattr(dp_utils, "sync_cudagraph_and_dp_padding", sync)


BUGS = {"DPPAD-003": _prefill_batches_refused_graphs, "DPPAD-004": _microbatch_threshold_ignored,
        "DPPAD-005": _eager_ranks_keep_their_graph_padding}
# A case where each bug shows and V2's rule does not microbatch, so the policy cannot explain the failure: the entry
# as first written (its field pattern alone) described each violation; narrowed, none.
SHOWN = {
    "DPPAD-003": DpPaddingCase(steps=((3, 5),), graph_sizes=(4, 8), microbatches=1, microbatch_threshold=2,
                               draft_tokens=0),
    "DPPAD-004": DpPaddingCase(steps=((3, 5),), graph_sizes=(), microbatches=2, microbatch_threshold=8, draft_tokens=0),
    "DPPAD-005": DpPaddingCase(steps=((3, 600),), graph_sizes=(1, 2, 4, 8, 16), microbatches=1, microbatch_threshold=2,
                               draft_tokens=3),
}
FIRST_WRITTEN = {"DPPAD-003": r"replays a graph", "DPPAD-004": r"microbatched \(", "DPPAD-005": r"tokens run without lockstep"}
ENGINES = ("vllm-dspark", "vllm-dspark-block")
CASES = [(e, c) for e in ENGINES for c in BUGS]
# The pinned example (PADDING_CASES: tokens [5, 4] at step 0) meets V2's rule at step 0 rank 0, on the very field
# DPPAD-003 and DPPAD-004 check first: `check` stops there, reports the known failure, and sees nothing after it.
# With no correction to re-run under (a policy, not a finding), those two contracts are blind to any other bug on
# vllm-dspark until the contract can expect V2's rule (docs/engines/vllm-dspark.md, proposed core changes).
SHADOWED = {"DPPAD-003", "DPPAD-004"}


@pytest.fixture(scope="module")
def engines(vllm_dspark_engine):
    from contracts.engines import load_engine

    return {"vllm-dspark": vllm_dspark_engine,
            "vllm-dspark-block": load_engine("contracts.adapters.vllm_dspark:VLLMDSparkBlockAdapter")}


def _entry(engine, contract_id):
    found = [e for e in engine.known_failures if e.contract_id == contract_id]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("engine_name, contract_id", CASES, ids=[f"{e}-{c}" for e, c in CASES])
def test_the_entry_does_not_describe_a_second_bug(engines, engine_name, contract_id):
    """The bug's violation on the entry's own field, at a step V2's rule does not microbatch: not the entry's."""
    engine, contract = engines[engine_name], all_contracts()[contract_id]
    entry = _entry(engine, contract_id)
    contract.check(engine, SHOWN[contract_id])  # intact, the case passes: what fails below is the bug
    with guarded_patches() as mp:
        BUGS[contract_id](mp)
        with pytest.raises(ContractViolation) as caught:
            check_case(contract, engine, SHOWN[contract_id])
    violation = caught.value
    assert re.search(FIRST_WRITTEN[contract_id], violation.what), str(violation)
    assert not entry.matches(violation), str(violation)


@pytest.mark.parametrize("engine_name, contract_id", CASES, ids=[f"{e}-{c}" for e, c in CASES])
def test_a_second_bug_fails_the_run(engines, ci_profile, engine_name, contract_id):  # noqa: F811
    engine = engines[engine_name]
    entry = _entry(engine, contract_id)
    if contract_id in SHADOWED:  # the gap, shown: once it closes, this fails and the contract leaves SHADOWED
        with guarded_patches() as mp, pytest.raises(pytest.xfail.Exception, match="policy divergence"):
            BUGS[contract_id](mp)
            run_with_ledger(all_contracts()[contract_id], engine)
        pytest.xfail("the pinned example's known failure comes first and hides the bug (see SHADOWED)")
    violation = assert_the_run_fails(engine, contract_id, entry, BUGS[contract_id])
    assert re.search(entry.field, violation.what), f"not the entry's field, so no test of its precision: {violation}"


@pytest.mark.parametrize("contract_id", sorted(BUGS))
def test_the_policy_divergence_is_still_known(vllm_dspark_engine, ci_profile, contract_id):  # noqa: F811
    """Narrowed, each entry still describes what the unmodified engine does."""
    with pytest.raises(pytest.xfail.Exception, match="policy divergence"):
        run_with_ledger(all_contracts()[contract_id], vllm_dspark_engine)


def test_every_vllm_dspark_ledger_entry_has_a_precision_case():
    from contracts.adapters.vllm_dspark.ledger import BLOCK_KNOWN_FAILURES, KNOWN_FAILURES

    assert sorted((e.engine, e.contract_id) for e in KNOWN_FAILURES + BLOCK_KNOWN_FAILURES) == sorted(CASES)
