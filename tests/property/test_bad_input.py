"""Bad input to the reference engine's public functions: a clear error naming the field, nothing written."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dspark import disaggregation
from dspark.draft_input import DraftInput
from dspark.dspark_draft import DraftBlockProposer
from dspark.overlap_utils import FutureMap, RelayPayload
from dspark.schedule_batch import Req, ReqToTokenPool, ScheduleBatch
from dspark.spec_info import SpecInput, spec_scale_global_num_tokens

POOL = 32


class _Width3(SpecInput):
    num_tokens_per_req = num_tokens_for_logprob_per_req = 3


WIDTH_3 = _Width3()
ints = lambda n, lo=0, hi=POOL - 1: st.lists(st.integers(lo, hi), min_size=n, max_size=n)  # noqa: E731


def t(values, dtype=torch.int64):
    return torch.tensor(values, dtype=dtype)


def relay_unchanged(fm: FutureMap, snapshot: dict) -> bool:
    return all(torch.equal(v, fm.snapshot()[k]) for k, v in snapshot.items())


@st.composite
def mismatched_lengths(draw):
    n = draw(st.integers(1, 8))
    m = draw(st.integers(0, 8).filter(lambda m: m != n))
    return n, m


@given(mismatched_lengths())
def test_publish_length_mismatch_rejected_and_relay_unchanged(lengths):
    n, m = lengths
    fm = FutureMap(POOL)
    before = fm.snapshot()
    with pytest.raises(ValueError, match="length mismatch"):
        fm.publish(torch.arange(n), t([5] * m))
    assert relay_unchanged(fm, before) and fm.publish_ready is None


@given(st.sampled_from([torch.float32, torch.float64, torch.bool]))
def test_stash_non_integer_bonus_rejected(dtype):
    fm = FutureMap(POOL)
    before = fm.snapshot()
    with pytest.raises(TypeError, match="payload.bonus_tokens"):
        fm.stash(torch.arange(2), RelayPayload(bonus_tokens=torch.ones(2, dtype=dtype)))
    assert relay_unchanged(fm, before)


@given(st.lists(st.integers(-10, -1), min_size=1, max_size=4))
def test_negative_seq_lens_rejected(negatives):
    fm = FutureMap(POOL)
    before = fm.snapshot()
    with pytest.raises(ValueError, match="new_seq_lens"):
        fm.publish(torch.arange(len(negatives)), t(negatives))
    assert relay_unchanged(fm, before)


@given(st.integers(POOL, POOL + 100))
def test_rows_outside_the_pool_rejected(row):
    fm = FutureMap(POOL)
    before = fm.snapshot()
    with pytest.raises(ValueError, match="indices"):
        fm.publish(t([1, row]), t([3, 4]))
    assert relay_unchanged(fm, before)


def test_duplicate_rows_rejected():
    fm = FutureMap(POOL)
    with pytest.raises(ValueError, match="distinct"):
        fm.stash(t([2, 2]), RelayPayload(bonus_tokens=t([1, 2])))


def test_resolve_without_publish_raises_when_strict():
    fm = FutureMap(POOL, strict=True)
    batch = ScheduleBatch(reqs=[], req_to_token_pool=ReqToTokenPool(POOL, 8), enable_overlap=True)
    batch.spec_info = DraftInput(bonus_tokens=t([1]), new_seq_lens=t([1]), future_indices=t([4]))
    with pytest.raises(RuntimeError, match="stale relay"):
        fm.resolve_seq_lens(batch)
    fm.publish(t([4]), t([9]))
    fm.resolve_seq_lens(batch)
    with pytest.raises(RuntimeError, match="stale relay"):  # consume-once: a second resolve needs a fresh publish
        fm.resolve_seq_lens(batch)


def test_a_stale_resolve_reads_the_poison_when_not_strict():
    """As SGLang outside CI: no check, but a poisoned relay makes the stale row visible as -1."""
    fm = FutureMap(POOL, poison=True)
    batch = ScheduleBatch(reqs=[], req_to_token_pool=ReqToTokenPool(POOL, 8), enable_overlap=True)
    batch.spec_info = DraftInput(bonus_tokens=t([1]), new_seq_lens=t([1]), future_indices=t([4]))
    fm.publish(t([4]), t([9]))
    fm.resolve_seq_lens(batch)
    assert batch.seq_lens.tolist() == [9]
    fm.resolve_seq_lens(batch)
    assert batch.seq_lens.tolist() == [-1]


def _batch(seq_lens, rows, overlap=True):
    pool = ReqToTokenPool(POOL, 64)
    reqs = [Req(i, [0] * n, [7], r, n) for i, (n, r) in enumerate(zip(seq_lens, rows))]
    return ScheduleBatch.prebuilt(reqs, pool, speculative_num_draft_tokens=3, enable_overlap=overlap)


@given(mismatched_lengths())
def test_handoff_length_mismatch_names_the_field(lengths):
    n, m = lengths
    batch = _batch([4] * n, list(range(n)))
    fm = FutureMap(POOL)
    before = fm.snapshot()
    with pytest.raises(ValueError, match="last_tokens_tensor"):
        disaggregation.build_dspark_disagg_draft_input(batch, t([1] * m), fm)
    assert relay_unchanged(fm, before)


@given(st.sampled_from([torch.float32, torch.bool]))
def test_handoff_non_integer_tokens_rejected(dtype):
    batch = _batch([4, 5], [1, 2])
    with pytest.raises(TypeError, match="last_tokens_tensor"):
        disaggregation.build_dspark_disagg_draft_input(batch, torch.ones(2, dtype=dtype), FutureMap(POOL))


def test_handoff_overlap_needs_a_future_map():
    with pytest.raises(TypeError, match="future_map"):
        disaggregation.build_dspark_disagg_draft_input(_batch([4], [1]), t([3]), None)


def test_prebuilt_request_without_first_token_rejected():
    with pytest.raises(ValueError, match="output_ids"):
        ScheduleBatch.prebuilt([Req(0, [0], [], 1, 4)], ReqToTokenPool(POOL, 64))


def test_prebuilt_request_longer_than_its_slot_rejected():
    with pytest.raises(ValueError, match="kv_committed_len.*exceeds"):
        ScheduleBatch.prebuilt([Req(0, [0] * 100, [5], 1, 100)], ReqToTokenPool(POOL, 64))


def test_prebuilt_request_whose_kv_does_not_cover_its_tokens_rejected():
    """Prompt 3 + outputs 2: the KV holds 4 tokens (all but the pending one), not 3."""
    with pytest.raises(ValueError, match=r"reqs\[0\].kv_committed_len: 3, but .* make 4"):
        ScheduleBatch.prebuilt([Req(0, [0, 0, 0], [5, 6], 1, 3)], ReqToTokenPool(POOL, 64))


def test_first_decode_without_slot_room_changes_no_request():
    batch = _batch([10, 60], [1, 2], overlap=False)
    disaggregation.process_prebuilt(batch, None)
    with pytest.raises(ValueError, match=r"reqs\[1\].kv_committed_len"):
        batch.prepare_for_decode()
    assert [r.kv_allocated_len for r in batch.reqs] == [0, 0] and [r.decode_batch_idx for r in batch.reqs] == [0, 0]


@given(st.lists(st.integers(0, 9), min_size=1, max_size=4), st.lists(st.integers(0, 9), min_size=5, max_size=8))
def test_scaling_rank_lists_of_different_lengths_rejected(counts, logprob_counts):
    with pytest.raises(ValueError, match="differ in length"):
        spec_scale_global_num_tokens(WIDTH_3, counts, logprob_counts)


@given(st.lists(st.integers(-50, -1), min_size=1, max_size=4))
def test_negative_counts_rejected(counts):
    with pytest.raises(ValueError, match="non-negative"):
        spec_scale_global_num_tokens(WIDTH_3, counts, counts)


def test_unset_width_rejected():
    with pytest.raises(ValueError, match="num_tokens_per_req"):
        spec_scale_global_num_tokens(SpecInput(), [1], [1])  # -1 = unset would give negative counts


@given(st.integers(-5, 0))
def test_draft_width_below_one_rejected(gamma):
    with pytest.raises(ValueError, match="gamma"):
        DraftBlockProposer(gamma)


def test_fill_with_bad_counts_writes_nothing():
    proposer = DraftBlockProposer(4, draft_is_moe=True, attn_dp_enabled=True, enable_num_token_non_padded=True)
    batch = _batch([4], [1], overlap=False)
    disaggregation.process_prebuilt(batch, None)
    fb = proposer.new_draft_forward_batch(batch)
    batch.global_num_tokens, batch.can_run_decode_cuda_graph = [1, -2], True
    with pytest.raises(ValueError, match="global_num_tokens"):
        proposer._fill_dp_moe_sync_metadata(fb, batch)
    assert fb.can_run_decode_cuda_graph is False and fb.num_token_non_padded_cpu is None


def test_merge_requires_matching_relay_use():
    a = DraftInput(bonus_tokens=t([1]), new_seq_lens=t([2]), future_indices=t([3]))
    b = DraftInput(bonus_tokens=t([4]), new_seq_lens=t([5]))
    with pytest.raises(ValueError, match="future_indices"):
        a.merge_batch(b)
    assert a.bonus_tokens.tolist() == [1]
