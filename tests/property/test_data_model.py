"""Semantics of the reference data model that the contracts rely on."""

import torch

from dspark import disaggregation
from dspark.draft_input import DraftInput
from dspark.overlap_utils import POISON, FutureMap, RelayPayload
from dspark.schedule_batch import Req, ReqToTokenPool, ScheduleBatch
from dspark.spec_info import SpeculativeAlgorithm


def t(values):
    return torch.tensor(values, dtype=torch.int64)


def test_dispatch_returns_none_only_for_none():
    pool = ReqToTokenPool(8, 64)
    for algo in SpeculativeAlgorithm:
        batch = ScheduleBatch.prebuilt([Req(0, [1] * 5, [9], 2, 5)], pool, spec_algorithm=algo)
        if algo.is_none():
            assert algo.build_disagg_draft_input(batch, t([9]), None) is None
        elif algo.is_dflash_family():
            assert algo.build_disagg_draft_input(batch, t([9]), None).bonus_tokens.tolist() == [9]
        else:  # not modelled: an explicit error instead of a silent None
            try:
                algo.build_disagg_draft_input(batch, t([9]), None)
            except NotImplementedError as e:
                assert algo.name in str(e)
            else:
                raise AssertionError(f"{algo} fell through")


def test_none_algorithm_prebuilt_stashes_bonus_and_clears_input_ids():
    pool = ReqToTokenPool(8, 64)
    batch = ScheduleBatch.prebuilt([Req(0, [1] * 5, [9], 2, 5)], pool, spec_algorithm=SpeculativeAlgorithm.NONE,
                                   enable_overlap=True)
    batch.input_ids = t([1])
    fm = FutureMap(8)
    disaggregation.process_prebuilt(batch, fm)
    assert batch.spec_info is None and batch.input_ids is None and fm.output_tokens_buf[2] == 9


def test_draft_input_shapes_and_idle_input():
    di = DraftInput(bonus_tokens=torch.tensor([3, 4], dtype=torch.int32), new_seq_lens=t([7, 8]))
    assert di.bonus_tokens.dtype == torch.int64 and di.num_tokens_per_req == 1 and di.is_draft_input()
    assert di.topk_p.shape == (2, 0) and di.hidden_states.dtype == torch.float16
    idle = DraftInput.create_idle_input()
    assert idle.bonus_tokens.shape == (0,) and idle.bonus_tokens.dtype == torch.int64


def test_filter_with_overlap_reindexes_only_future_indices():
    di = DraftInput(bonus_tokens=t([1, 2, 3]), new_seq_lens=t([4, 5, 6]), future_indices=t([7, 8, 9]))
    di.filter_batch(t([2, 0]))
    assert di.future_indices.tolist() == [9, 7] and di.bonus_tokens.tolist() == [1, 2, 3]


def test_filter_and_merge_without_overlap():
    di = DraftInput(bonus_tokens=t([1, 2, 3]), new_seq_lens=t([4, 5, 6]))
    di.filter_batch(t([2, 0]))
    assert di.bonus_tokens.tolist() == [3, 1] and di.new_seq_lens.tolist() == [6, 4]
    di.merge_batch(DraftInput(bonus_tokens=t([9]), new_seq_lens=t([10])))
    assert di.bonus_tokens.tolist() == [3, 1, 9] and di.topk_index.shape == (3, 0)


def test_prepare_for_decode_reserves_two_windows_page_aligned_and_never_shrinks():
    pool = ReqToTokenPool(8, 128, page_size=4)
    reqs = [Req(0, [1] * 5, [9], 1, 5), Req(1, [1] * 9, [9], 2, 9, kv_allocated_len=64)]
    batch = ScheduleBatch.prebuilt(reqs, pool, speculative_num_draft_tokens=6)
    disaggregation.process_prebuilt(batch, None)
    batch.prepare_for_decode()
    assert [r.kv_allocated_len for r in reqs] == [20, 64]  # ceil4(5 + 12) = 20; 64 kept
    assert batch.seq_lens_cpu.tolist() == [5, 9] and batch.seq_lens_sum == 14
    assert [r.decode_batch_idx for r in reqs] == [1, 1]


def test_poisoned_relay_rows_are_reset_after_resolve():
    fm = FutureMap(8, poison=True)
    batch = ScheduleBatch(reqs=[], req_to_token_pool=ReqToTokenPool(8, 8), enable_overlap=True)
    batch.spec_info = DraftInput(bonus_tokens=t([0]), new_seq_lens=t([0]), future_indices=t([3]))
    fm.publish(t([3]), t([12]))
    fm.stash(t([3]), RelayPayload(bonus_tokens=t([44])))
    fm.resolve_seq_lens(batch)
    fm.resolve_forward_inputs(batch)
    assert batch.seq_lens.tolist() == [12] and batch.spec_info.bonus_tokens.tolist() == [44]
    assert fm.new_seq_lens_buf[3] == POISON and fm.output_tokens_buf[3] == POISON
