"""SGLang's step level as a PD decode server (`sglang-pd`): requests prefilled by SGLang's own prefill join through
SGLang's PD decode path (prealloc queue, transfer queue, process_prebuilt with build_dspark_disagg_draft_input, the
FutureMap under overlap) and decode with DSpark; the decode-loop contracts hold there, and bugs put back into the
PD handoff, which the local-prefill engine never runs, are caught.

Runs only where sglang 0.5.23 is installed (`bash scripts/install_sglang.sh`).
"""

import pytest

from contracts.boundary.engine import EngineSpec, RequestSpec
from contracts.engines import load_engine
from contracts.registry import all_contracts
from contracts.runner import run_contract
from tests.caught import assert_caught, violation_with


@pytest.fixture(scope="module")
def pd_engine(sglang_engine):  # the session fixture skips without SGLang
    return load_engine("sglang-pd")


@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
def test_requests_join_through_the_decode_path_with_their_prompt_kv(pd_engine, overlap):
    from sglang.srt.disaggregation.utils import DisaggregationMode

    handle = pd_engine.new_engine(EngineSpec(vocab_size=8, gamma=3, drafter="oracle", enable_overlap=overlap))
    s = handle.slot.scheduler
    assert s.disaggregation_mode == DisaggregationMode.DECODE
    pd_engine.add_requests(handle, [RequestSpec(0, (3, 1, 2), 0.0, 9), RequestSpec(1, (5,), 0.0, 1)], "local")
    views = {v.rid: v for v in pd_engine.request_views(handle)}
    # The prompt's KV rows arrived (decoded from the decode server's own KV pool); a request its first token ends is
    # finished at the handoff.
    assert views[0].live and views[0].cache_tokens == [3, 1, 2] and views[0].seq_len == 3
    assert not views[1].live and views[1].finish_reason == "length" and len(views[1].output) == 1
    view = pd_engine.step(handle)
    assert view.rids == [0] and view.commit_lens == [4]  # the oracle drafter: gamma + 1 tokens in the first step


def _handoff_counts_the_anchor(mp):
    """The DSpark PD handoff's draft input says the handed-over request's committed length includes its first
    token (the pending anchor): the first decode writes its verify window one position late."""
    from sglang.srt.managers.overlap_utils import RelayPayload
    from sglang.srt.speculative import dspark_disaggregation as dd

    def build(batch, last_tokens_tensor, future_map):
        spec_info = dd.make_next_draft_input(bonus_tokens=last_tokens_tensor, new_seq_lens=batch.seq_lens + 1)
        if batch.enable_overlap:
            spec_info.future_dsa_topk_indices_available = False
            spec_info.future_indices = batch.req_pool_indices
            future_map.publish(spec_info.future_indices, batch.seq_lens + 1)
            future_map.stash(spec_info.future_indices, RelayPayload.from_draft_input(spec_info))
        return spec_info

    mp.setattr(dd, "build_dspark_disagg_draft_input", build)


BUGS = [
    ("the PD handoff counts the anchor as committed", _handoff_counts_the_anchor, ("LOOP-002",)),
]


@pytest.mark.parametrize("patch, contract_id",
                         [pytest.param(p, cid, id=f"{cid}-{name}") for name, p, ids in BUGS for cid in ids])
def test_reinserted_pd_bug_is_caught(pd_engine, patch, contract_id):
    contract = all_contracts()[contract_id]
    assert_caught(violation_with(patch, contract, pd_engine), contract, pd_engine)


def test_liveness_after_the_pd_handoff(pd_engine):
    run_contract(all_contracts()["LOOP-007"], pd_engine, profile="ci")
