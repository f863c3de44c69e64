from __future__ import annotations

import torch

from contracts.adapters.reference.names import dp_fields, set_dp_inputs
from contracts.boundary.dp import DpPaddingCase, DpPaddingRank, DpPaddingRun, DpSyncCase, DpSyncObservation
from dspark import dp_padding, forward_batch_info, spec_info
from dspark.draft_input import DraftInput
from dspark.dspark_draft import DraftBlockProposer
from dspark.schedule_batch import Req, ReqToTokenPool, ScheduleBatch
from dspark.spec_info import SpecInput


class _Widths(SpecInput):
    def __init__(self, width: int, logprob_width: int):
        self.num_tokens_per_req, self.num_tokens_for_logprob_per_req = width, logprob_width


class ReferenceDpMetadata:
    def _proposer_and_batch(self, case: DpSyncCase):
        proposer = DraftBlockProposer(
            case.gamma,
            sample_from_anchor=case.sample_from_anchor,
            draft_is_moe=case.moe_dp_sync,
            attn_dp_enabled=case.moe_dp_sync,
            enable_num_token_non_padded=case.device_non_padded_count,
        )
        pool = ReqToTokenPool(max(case.bs, 1), 64)
        reqs = [Req(rid=i, origin_input_ids=[0], output_ids=[1], req_pool_idx=i, kv_committed_len=1) for i in range(case.bs)]
        batch = ScheduleBatch.prebuilt(reqs, pool, speculative_num_draft_tokens=case.gamma + 1)
        batch.spec_info = DraftInput(bonus_tokens=torch.ones(case.bs, dtype=torch.int64), new_seq_lens=batch.seq_lens.clone())
        set_dp_inputs(batch, case)
        return proposer, batch

    def _observe(self, case: DpSyncCase, fill) -> DpSyncObservation:
        proposer, batch = self._proposer_and_batch(case)
        fb = proposer.new_draft_forward_batch(batch)
        before = dp_fields(fb)
        fill(proposer, fb, batch)
        return DpSyncObservation(before=before, after=dp_fields(fb), num_tokens=int(fb.input_ids.numel()))

    def fill_draft_dp_metadata(self, case: DpSyncCase) -> DpSyncObservation:
        return self._observe(case, lambda proposer, fb, batch: proposer._fill_dp_moe_sync_metadata(fb, batch))

    def fill_scheduler_dp_metadata(self, case: DpSyncCase) -> DpSyncObservation:
        return self._observe(case, lambda proposer, fb, batch: fb.init_mlp_sync_metadata(batch, is_draft_worker=True))

    def scale_rank_counts(self, counts, logprob_counts, width: int, logprob_width: int):
        return spec_info.spec_scale_global_num_tokens(_Widths(width, logprob_width), list(counts), list(logprob_counts))

    def local_non_padded_tokens(self, case):
        return [forward_batch_info.local_num_token_non_padded(case.global_count, case.rank_width, case.attn_tp_size, r)
                for r in range(case.attn_tp_size)]

    def coordinate_dp_padding(self, case: DpPaddingCase) -> DpPaddingRun:
        """Every rank's step through `dspark.dp_padding.coordinate`, in this process: each rank's plan is gathered
        before any rank decides (the all-gather every rank joins), an idle rank's forward holds 0 tokens."""
        world, ranks = case.world_size, [[] for _ in range(case.world_size)]
        for s, row in enumerate(case.steps):
            plans = [dp_padding.local_plan(row[r], case.graph_sizes, case.microbatches, case.microbatch_threshold)
                     for r in range(world)]
            for r in range(world):
                p = dp_padding.coordinate(r, row[r], case.graph_sizes, case.microbatches, case.microbatch_threshold,
                                          lambda mine, r=r: plans[:r] + [mine] + plans[r + 1:])
                ranks[r].append(DpPaddingRank(r, s, row[r], p.padded_tokens, tuple(p.rank_padded_tokens), p.graph,
                                              p.microbatched))
        return DpPaddingRun(case, tuple(map(tuple, ranks)), None)
