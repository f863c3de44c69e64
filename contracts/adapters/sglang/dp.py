"""DP-metadata level on SGLang: the draft ForwardBatch as `DraftBlockProposer.propose` builds and fills it."""

from __future__ import annotations

from types import SimpleNamespace

from contracts.adapters.sglang.draft import build_draft_side, idle_participation, propose
from contracts.adapters.sglang.names import dp_fields, set_dp_inputs
from contracts.adapters.sglang.runtime import CPU, runtime
from contracts.boundary.dp import DpSyncCase, DpSyncObservation

PREFIX = 10  # committed tokens per request; the fill does not read them


def _scheduler_batch(case: DpSyncCase):
    """A real decode ScheduleBatch (after the PD handoff) with the DP fields the MLP-sync gather sets."""
    rt = runtime()
    from sglang.srt.managers.overlap_utils import FutureMap

    T = case.gamma + 1
    pools = rt.pools(pool_size=max(case.bs, 1), kv_slots=case.bs * (PREFIX + 2 * T + 1) + 1)
    with rt.config(num_draft_tokens=T):
        if case.bs:
            reqs = [rt.prebuilt_request(pools, f"r{i}", PREFIX, 1) for i in range(case.bs)]
            batch = rt.schedule_batch(pools, reqs, enable_overlap=False)
            batch.prepare_for_prebuilt()
            # The first decode's KV reservation (prepare_for_decode) is the kv level's subject; the fill reads
            # only the counts and flags below, so it is left out here.
            batch.process_prebuilt(FutureMap(CPU, batch.spec_algorithm, pools.req_to_token_pool))
        else:  # the scheduler's idle batch for a DP rank with nothing to run (get_idle_batch)
            batch = rt.schedule_batch(pools, [], enable_overlap=False)
            batch.prepare_for_idle()
    set_dp_inputs(batch, case)
    return batch, pools


class SGLangDpMetadata:
    def _fill(self, case: DpSyncCase):
        batch, pools = _scheduler_batch(case)
        side = build_draft_side(gamma=case.gamma, sample_from_anchor=case.sample_from_anchor, dp_moe_sync=case.moe_dp_sync,
                                enable_num_token_non_padded=case.device_non_padded_count,
                                req_to_token_pool=pools.req_to_token_pool, allocator=pools.allocator, record_fill=dp_fields)
        knobs = dict(dp_moe_sync=case.moe_dp_sync, enable_num_token_non_padded=case.device_non_padded_count)
        with runtime().config(num_draft_tokens=case.gamma + 1):
            if case.bs:
                propose(side, batch, **knobs)
            else:
                idle_participation(side, batch, **knobs)
        return side, batch

    def fill_draft_dp_metadata(self, case: DpSyncCase) -> DpSyncObservation:
        side, _ = self._fill(case)
        if not side.fills:
            return DpSyncObservation({}, {}, 0, built=False)
        before, after, fb = side.fills[-1]
        return DpSyncObservation(before=before, after=after, num_tokens=int(fb.input_ids.numel()))

    def fill_scheduler_dp_metadata(self, case: DpSyncCase) -> DpSyncObservation:
        """ForwardBatch.init_mlp_sync_metadata (draft worker) on the draft batch the proposer built, before its fill."""
        side, batch = self._fill(case)
        if not side.fills:
            return DpSyncObservation({}, {}, 0, built=False)
        fb = side.fills[-1][2]
        before = dp_fields(fb)
        fb.init_mlp_sync_metadata(batch, CPU, is_draft_worker=True)
        return DpSyncObservation(before=before, after=dp_fields(fb), num_tokens=int(fb.input_ids.numel()))

    def scale_rank_counts(self, counts, logprob_counts, width: int, logprob_width: int):
        from sglang.srt.speculative.spec_info import spec_scale_global_num_tokens

        widths = SimpleNamespace(num_tokens_per_req=width, num_tokens_for_logprob_per_req=logprob_width)
        return spec_scale_global_num_tokens(widths, list(counts), list(logprob_counts))

    def local_non_padded_tokens(self, case):
        """ForwardBatch.set_local_num_token_non_padded on each attention-TP rank of one DP rank (the MLP-sync path:
        the per-DP width from global_num_tokens_cpu)."""
        runtime()
        import torch
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
        from sglang.srt.runtime_context import get_parallel

        tp, out = case.attn_tp_size, []
        for rank in range(tp):
            empty = torch.zeros(0, dtype=torch.int64)
            fb = ForwardBatch(forward_mode=ForwardMode.DECODE, batch_size=0, input_ids=empty, req_pool_indices=empty,
                              seq_lens=empty, out_cache_loc=empty, seq_lens_sum=0)
            fb.global_num_tokens_cpu = [case.rank_width]
            fb.global_num_token_non_padded = torch.tensor(case.global_count, dtype=torch.int32)
            with get_parallel().override(tp_size=tp, attn_tp_size=tp, attn_tp_rank=rank, attn_dp_size=1, attn_cp_size=1,
                                         moe_tp_size=tp):
                fb.set_local_num_token_non_padded(sharded=True)
            out.append(int(fb.num_token_non_padded))
        return out
