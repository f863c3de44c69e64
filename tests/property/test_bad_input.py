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
from dspark.spec_info import SpecInput, SpeculativeAlgorithm, spec_scale_global_num_tokens

POOL = 32


class _Width3(SpecInput):
    num_tokens_per_req = num_tokens_for_logprob_per_req = 3


WIDTH_3 = _Width3()
ints = lambda n, lo=0, hi=POOL - 1: st.lists(st.integers(lo, hi), min_size=n, max_size=n)  # noqa: E731


def t(values, dtype=torch.int64):
    return torch.tensor(values, dtype=dtype)


def relay_unchanged(fm: FutureMap, snapshot: dict) -> bool:
    """Buffers, consume-once flags and confidence ring as they were (a refused call must not mark a row fresh)."""
    now = fm.snapshot()
    return now.keys() == snapshot.keys() and all(torch.equal(v, now[k]) for k, v in snapshot.items())


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


def test_merge_of_mismatched_side_tensors_changes_nothing():
    a = DraftInput(bonus_tokens=t([1]), new_seq_lens=t([2]))
    b = DraftInput(bonus_tokens=t([4]), new_seq_lens=t([5]), hidden_states=torch.zeros(1, 3))
    with pytest.raises(ValueError, match="other.hidden_states"):
        a.merge_batch(b)
    assert a.bonus_tokens.tolist() == [1] and a.new_seq_lens.tolist() == [2] and a.hidden_states.shape == (1, 0)


def test_draft_input_side_tensors_need_a_row_per_request():
    with pytest.raises(ValueError, match="hidden_states"):
        DraftInput(bonus_tokens=t([1, 2]), new_seq_lens=t([3, 4]), hidden_states=torch.zeros(1, 0))
    with pytest.raises(ValueError, match="new_indices"):
        DraftInput.create_idle_input().filter_batch(t([0]))


def test_draft_input_row_fields_need_a_row_per_request_and_own_relay_rows():
    with pytest.raises(ValueError, match="confidence"):
        DraftInput(bonus_tokens=t([1, 2]), new_seq_lens=t([3, 4]), confidence=torch.zeros(1, 3))
    with pytest.raises(ValueError, match="nxt_kv_lens_cpu"):
        DraftInput(bonus_tokens=t([1, 2]), new_seq_lens=t([3, 4]), nxt_kv_lens_cpu=t([5]))
    with pytest.raises(ValueError, match="future_indices"):
        DraftInput(bonus_tokens=t([1, 2]), new_seq_lens=t([3, 4]), future_indices=t([0, 1, 2]))
    with pytest.raises(ValueError, match="future_indices: entries must be distinct"):
        DraftInput(bonus_tokens=t([1, 2]), new_seq_lens=t([3, 4]), future_indices=t([3, 3]))


def test_a_filter_refused_for_a_short_field_cuts_nothing():
    di = DraftInput(bonus_tokens=t([1, 2]), new_seq_lens=t([3, 4]), nxt_kv_lens_cpu=t([5, 6]))
    di.confidence = torch.zeros(1, 3)  # set after construction, one row short
    with pytest.raises(ValueError, match="confidence: 1 rows, but the batch holds 2"):
        di.filter_batch(t([1]))
    assert di.nxt_kv_lens_cpu.tolist() == [5, 6] and di.bonus_tokens.tolist() == [1, 2]


def test_a_merge_onto_a_used_relay_row_changes_nothing():
    a = DraftInput(bonus_tokens=t([1]), new_seq_lens=t([2]), future_indices=t([3]))
    b = DraftInput(bonus_tokens=t([4]), new_seq_lens=t([5]), future_indices=t([3]))
    with pytest.raises(ValueError, match="other.future_indices: entries must be distinct"):
        a.merge_batch(b)
    assert a.bonus_tokens.tolist() == [1] and a.future_indices.tolist() == [3]


def test_prebuilt_without_speculation_names_a_missing_relay_and_a_float_token():
    batch = _batch([4], [1])
    batch.spec_algorithm = SpeculativeAlgorithm.NONE
    with pytest.raises(TypeError, match="future_map"):
        disaggregation.process_prebuilt(batch, None)
    batch = _batch([4], [1])
    batch.reqs[0].output_ids = [5.9]  # would truncate to token 5
    with pytest.raises(TypeError, match=r"output_ids\[-1\]"):
        disaggregation.process_prebuilt(batch, FutureMap(POOL))
    assert batch.spec_info is None


def test_a_refused_reservation_leaves_the_batch_mode():
    batch = _batch([60], [0], overlap=False)  # 60 + 2*3 slots pass the 64-wide row
    disaggregation.process_prebuilt(batch, None)
    mode = batch.forward_mode
    with pytest.raises(ValueError, match="kv_committed_len"):
        batch.prepare_for_decode()
    assert batch.forward_mode == mode and batch.reqs[0].kv_allocated_len == 0


def test_a_relay_read_refused_consumes_nothing():
    fm = FutureMap(POOL)
    batch = _batch([4], [3])
    disaggregation.process_prebuilt(batch, fm)
    batch.spec_info.future_dsa_topk_indices_available = True  # claims indices nobody stashed
    fresh = fm._fresh_bonus.clone()
    with pytest.raises(RuntimeError, match="DSA"):
        fm.resolve_forward_inputs(batch)
    assert torch.equal(fm._fresh_bonus, fresh)
    batch.spec_info.future_indices = t([POOL + 1])
    with pytest.raises(ValueError, match="future_indices"):
        fm.resolve_seq_lens(batch)
    with pytest.raises(ValueError, match="rows"):
        fm.confidence_ring.read(t([-1]))  # would wrap to the last row
    with pytest.raises(ValueError, match="device"):
        FutureMap(POOL, device="gpu0")


def test_kv_rows_and_pages_are_checked_before_any_page_is_taken():
    from dspark.mem_cache import TokenToKVPoolAllocator, extend_rows

    table, alloc = torch.zeros(4, 8, dtype=torch.int32), TokenToKVPoolAllocator(16)
    for rows, cur, nxt, field in (([5], [0], [4], r"rows\[0\]"), ([0], [0, 0], [4, 4], "rows"), ([1, 1], [0, 0], [2, 2], "rows")):
        with pytest.raises(ValueError, match=field):
            extend_rows(table, rows, cur, nxt, alloc)
    assert alloc.available_size() == 16 and not table.any()
    with pytest.raises(ValueError, match=r"^n: must be >= 0"):
        alloc.alloc_pages(-1)
    with pytest.raises(TypeError, match=r"^n: expected int"):
        alloc.alloc_pages(True)


def test_draft_context_appends_are_checked_before_any_write():
    from dspark.mem_cache import DraftContextPool

    pool = DraftContextPool(2, 8, 3)
    pool.load(0, torch.ones(2, 3, dtype=torch.float64))
    hidden = torch.zeros(1, 2, 3, dtype=torch.float64)
    for rows, h, counts, field in ((t([0]), hidden, t([-3]), "counts"), (t([0]), hidden, t([6]), "counts"),
                                   (t([0]), torch.zeros(1, 2, 4), t([1]), "hidden"), (t([2]), hidden, t([1]), "rows"),
                                   (t([0]), hidden, t([1, 1]), "length mismatch"),
                                   (t([0, 0]), hidden.repeat(2, 1, 1), t([1, 1]), "rows: entries must be distinct"),
                                   (t([0]), torch.full((1, 2, 3), float("nan")), t([1]), "hidden: holds NaN")):
        with pytest.raises(ValueError, match=field):
            pool.append(rows, h, counts)
    assert pool.lens.tolist() == [2, 0]
    pool.append(t([1]), torch.full((1, 2, 3), 6e4, dtype=torch.float16), t([2]))  # finite, though its sum is not in fp16
    assert pool.lens.tolist() == [2, 2]
    with pytest.raises(ValueError, match="row"):
        pool.load(-1, torch.ones(1, 3, dtype=torch.float64))  # would wrap to the last row


def test_the_carried_confidence_is_checked_as_the_relay_checks_it():
    from dspark.overlap_utils import BudgetConfidence

    bc = BudgetConfidence(POOL)
    with pytest.raises(ValueError, match="confidence: values must lie in"):
        bc.record(t([1]), torch.tensor([[float("nan"), 7.0]], dtype=torch.float64), t([1]))
    assert bc.carry.width is None
    with pytest.raises(TypeError, match="rows"):
        bc.read([1, 2], torch.zeros(2, 2), t([1, 1]))
    with pytest.raises(ValueError, match="confidence"):
        bc.read(t([1, 2]), torch.zeros(2), t([1, 1]))


def test_planner_arguments_name_the_field():
    from dspark import planner

    surv = torch.full((2, 3), 0.5, dtype=torch.float64)
    cases = [
        (lambda: planner.compute_verify_token_budget(torch.ones(3)), ValueError, "lagged_survival"),
        (lambda: planner.select_cells(surv, float("nan")), TypeError, "budget"),
        (lambda: planner.schedule_verify_lens(surv, 2, max_verify_len=0), ValueError, "max_verify_len"),
        (lambda: planner.schedule_verify_lens(surv, 2, min_verify_len=5, max_verify_len=9), ValueError, "max_verify_len"),
        (lambda: planner.plan_step(surv, surv, verify_mode="bogus"), ValueError, "verify_mode"),
        (lambda: planner.pad_verify_lens_to_bucket(t([-3, 2]), 8, 3), ValueError, "verify_lens"),
        (lambda: planner.schedule_verify_lens(torch.ones(3), 1), ValueError, "surv"),
        (lambda: planner.select_cells([[0.5]], 1), ValueError, "surv"),
        (lambda: planner.compute_verify_token_budget(torch.tensor([[0.5, float("nan")]])), ValueError, "lagged_survival"),
        (lambda: planner.compute_verify_token_budget(surv, "x"), TypeError, "table"),
        (lambda: planner.plan_step(torch.full((5, 3), 0.5), surv, verify_mode="cap-accept"), ValueError,
         "budget_confidence"),
        (lambda: planner.RaggedVerifyLayout.from_lens(t([1, 2]), 3, pad_to=4.5), TypeError, "pad_to"),
        (lambda: planner.RaggedVerifyLayout.from_lens(t([1, 2]), 3).pack(torch.zeros(2, 4, dtype=torch.int64)),
         ValueError, "candidates"),
        (lambda: planner.pad_verify_lens_to_bucket(t([2, 2]), 8.5, 3), TypeError, "graph_num_tokens"),
        (lambda: planner.SpsAdditiveCostTable(1.0, ((1,),), ((1, 0.0),)), ValueError, "alpha_points"),
        (lambda: planner.SpsAdditiveCostTable(1.0, ((1, float("nan")),), ((1, 0.0),)), ValueError, "alpha_points"),
        (lambda: planner.SpsAdditiveCostTable(float("inf"), ((1, 0.0),), ((1, 0.0),)), ValueError, "bias_seconds"),
        (lambda: planner.SpsCostTable((1, 2), (1.0, 1.0), max_batch_tokens=float("nan")), TypeError, "max_batch_tokens"),
    ]
    for call, error, field in cases:
        with pytest.raises(error, match=field):
            call()


def test_graph_padding_and_tp_sync_arguments_name_the_field():
    from dspark import dp_padding, graph_buckets
    from dspark.spec_tp_sync import SpecTpSync

    plans = [dp_padding.local_plan(3, [4, 8], 1, 0)] * 2
    cases = [
        (lambda: graph_buckets.graph_batch_size(3, []), "buckets"),
        (lambda: graph_buckets.pad_to_bucket(3, [8, 4]), "buckets"),
        (lambda: graph_buckets.capture_num_tokens([0, -2], 3), "capture_bs"),
        (lambda: dp_padding.agree(5, plans, 1), "rank"),
        (lambda: dp_padding.agree(-1, plans, 1), "rank"),  # would wrap to the last rank
        (lambda: dp_padding.agree(0, [], 1), "plans"),
        (lambda: dp_padding.agree(0, plans, 0), "microbatches"),
        (lambda: SpecTpSync(world_size=0), "world_size"),
    ]
    for call, field in cases:
        with pytest.raises(ValueError, match=field):
            call()


def test_verify_window_arguments_name_the_field():
    from dspark.dspark_draft import alloc_verify_window, commit_inject_layout, with_verify_window
    from dspark.forward_batch_info import ForwardBatch  # noqa: F401  (the window's consumer)

    batch = _batch([4, 5], [0, 1], overlap=False)
    window = alloc_verify_window(batch, 3)
    with pytest.raises(ValueError, match="commit_lens"):
        commit_inject_layout(window, t([1]))
    with pytest.raises(ValueError, match="commit_lens"):
        commit_inject_layout(window, t([1, 4]))
    with pytest.raises(ValueError, match="query_token_num"):
        with_verify_window(None, window, 4)
    batch.seq_lens = t([-2, 5])
    with pytest.raises(ValueError, match="batch.seq_lens"):
        alloc_verify_window(batch, 3)


def test_confidences_outside_zero_one_are_refused_where_they_enter():
    from dspark import planner

    for bad in (float("nan"), 1.7, -0.1):
        conf = torch.tensor([[0.5, bad]], dtype=torch.float64)
        with pytest.raises(ValueError, match="confidence: values must lie in"):
            planner.survival(conf)
        fm = FutureMap(POOL)
        before = fm.snapshot()
        with pytest.raises(ValueError, match="confidence"):
            fm.publish(t([1]), t([4]), conf, t([1]))
        assert relay_unchanged(fm, before) and fm.confidence_ring.width is None


def test_a_drafter_whose_output_is_out_of_range_is_named():
    from dspark.toy_models import ToyTarget, make_drafter

    target = ToyTarget(8, seed=0)
    real = make_drafter("vanilla", target)

    class Broken:
        vocab_size = 8

        def __init__(self, token=None, confidence=None):
            self.token, self.confidence = token, confidence

        def draft_block(self, *args):
            tokens, logits, conf = real.draft_block(*args)
            if self.token is not None:
                tokens[0, 0] = self.token
            if self.confidence is not None:
                conf[0, 0] = self.confidence
            return tokens, logits, conf

    proposer = DraftBlockProposer(3, mask_token_id=7)
    ctx = [torch.zeros(1, target.hidden_size, dtype=torch.float64)]
    args = ([[1]], ctx, t([2]), torch.zeros(1, dtype=torch.float64), torch.zeros(1, 3, 8, dtype=torch.float64))
    for drafter, field in ((Broken(token=8), "drafter: draft tokens"), (Broken(confidence=float("nan")), "drafter: confidence")):
        with pytest.raises(ValueError, match=field):
            proposer.propose(drafter, *args)


def test_rows_are_ints_and_a_filter_keeps_each_request_once():
    with pytest.raises(TypeError, match=r"reqs\[0\].req_pool_idx"):
        ScheduleBatch.prebuilt([Req(0, [0, 0], [5], 1.7, 2)], ReqToTokenPool(POOL, 64))
    di = DraftInput(bonus_tokens=t([1, 2]), new_seq_lens=t([3, 4]))
    with pytest.raises(ValueError, match="new_indices: entries must be distinct"):
        di.filter_batch(t([1, 1]))
    assert di.bonus_tokens.tolist() == [1, 2]


def test_markov_draft_tables_that_disagree_are_named_before_any_draw():
    from contracts.adapters.reference import ReferenceAdapter

    engine, n = ReferenceAdapter(), torch.zeros(2, dtype=torch.int64)
    with pytest.raises(ValueError, match="base_logits: expected"):
        engine.markov_draft(torch.zeros(2, 6), torch.zeros(6, 6), n, n.double(), n, n)
    with pytest.raises(ValueError, match=r"bias: expected \[V, V\] = \[6, 6\]"):
        engine.markov_draft(torch.zeros(2, 3, 6), torch.zeros(5, 6), n, n.double(), n, n)
