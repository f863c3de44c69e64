from __future__ import annotations

import copy

import torch

from contracts.boundary.dp import ALL_FIELDS, DpSyncCase, DpSyncObservation
from dspark import forward_batch_info, spec_info
from dspark.draft_input import DraftInput
from dspark.dspark_draft import DraftBlockProposer
from dspark.schedule_batch import Req, ReqToTokenPool, ScheduleBatch
from dspark.spec_info import SpecInput


def _fields(fb) -> dict:
    return {f: copy.deepcopy(getattr(fb, f)) for f in ALL_FIELDS}


class _Widths(SpecInput):
    def __init__(self, width: int, logprob_width: int):
        self.num_tokens_per_req, self.num_tokens_for_logprob_per_req = width, logprob_width


class ReferenceDpMetadata:
    def _proposer_and_batch(self, case: DpSyncCase):
        proposer = DraftBlockProposer(
            case.gamma,
            sample_from_anchor=case.sample_from_anchor,
            draft_is_moe=case.dp_moe_sync,
            attn_dp_enabled=case.dp_moe_sync,
            enable_num_token_non_padded=case.enable_num_token_non_padded,
        )
        pool = ReqToTokenPool(max(case.bs, 1), 64)
        reqs = [Req(rid=i, origin_input_ids=[0], output_ids=[1], req_pool_idx=i, kv_committed_len=1) for i in range(case.bs)]
        batch = ScheduleBatch.prebuilt(reqs, pool, speculative_num_draft_tokens=case.gamma + 1)
        batch.spec_info = DraftInput(bonus_tokens=torch.ones(case.bs, dtype=torch.int64), new_seq_lens=batch.seq_lens.clone())
        lists = lambda v: None if v is None else list(v)  # noqa: E731
        batch.global_num_tokens = lists(case.global_num_tokens)
        batch.global_num_tokens_for_logprob = lists(case.global_num_tokens_for_logprob)
        batch.dp_spec_prefill_coordination_applied = case.coordination_applied
        batch.can_run_decode_cuda_graph = case.can_run_decode_cuda_graph
        batch.is_extend_in_batch = case.is_extend_in_batch
        return proposer, batch

    def _observe(self, case: DpSyncCase, fill) -> DpSyncObservation:
        proposer, batch = self._proposer_and_batch(case)
        fb = proposer.new_draft_forward_batch(batch)
        before = _fields(fb)
        fill(proposer, fb, batch)
        return DpSyncObservation(before=before, after=_fields(fb), input_ids_numel=int(fb.input_ids.numel()))

    def fill_draft_dp_metadata(self, case: DpSyncCase) -> DpSyncObservation:
        return self._observe(case, lambda proposer, fb, batch: proposer._fill_dp_moe_sync_metadata(fb, batch))

    def init_mlp_sync_metadata(self, case: DpSyncCase) -> DpSyncObservation:
        return self._observe(case, lambda proposer, fb, batch: fb.init_mlp_sync_metadata(batch, is_draft_worker=True))

    def scale_global_num_tokens(self, counts, logprob_counts, width: int, logprob_width: int):
        return spec_info.spec_scale_global_num_tokens(_Widths(width, logprob_width), list(counts), list(logprob_counts))

    def local_num_token_non_padded(self, case):
        return [forward_batch_info.local_num_token_non_padded(case.global_count, case.num_tokens_per_dp, case.attn_tp_size, r)
                for r in range(case.attn_tp_size)]
