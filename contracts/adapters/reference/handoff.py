from __future__ import annotations

from contracts.boundary.handoff import DraftInputView, HandoffCase, RelayEvent, ResolvedInputs
from dspark import disaggregation
from dspark.overlap_utils import FutureMap
from dspark.schedule_batch import Req, ReqToTokenPool, ScheduleBatch
from dspark.spec_info import SpeculativeAlgorithm


def _draft_input_view(draft_input, req_pool_indices) -> DraftInputView:
    fi = draft_input.future_indices
    return DraftInputView(
        is_draft_input=bool(draft_input.is_draft_input()),
        bonus_tokens=draft_input.bonus_tokens.clone(),
        new_seq_lens=draft_input.new_seq_lens.clone(),
        future_indices=None if fi is None else fi.clone(),
        future_indices_is_req_pool_indices=fi is req_pool_indices,
        future_dsa_topk_indices_available=bool(draft_input.future_dsa_topk_indices_available),
    )


def _record_relay(relay) -> list:
    """Record the FutureMap's publish/stash calls, then let them run: not a mock, the engine's own FutureMap still
    does the work; only the two bound methods of this instance are wrapped."""
    events: list = []
    publish, stash = relay.publish, relay.stash

    def recorded_publish(indices, new_seq_lens, *args, **kwargs):
        events.append(RelayEvent("publish", indices.tolist(), new_seq_lens.tolist()))
        return publish(indices, new_seq_lens, *args, **kwargs)

    def recorded_stash(indices, payload, *args, **kwargs):
        events.append(RelayEvent("stash", indices.tolist(), payload.bonus_tokens.tolist()))
        return stash(indices, payload, *args, **kwargs)

    relay.publish, relay.stash = recorded_publish, recorded_stash
    return events


class ReferenceHandoff:
    handoff_algorithms = ("dspark", "dflash")

    def new_relay(self, batch) -> FutureMap:
        # Poisoned rows make a stale read visible as -1 instead of a plausible value.
        return FutureMap(batch.req_to_token_pool.size, poison=True, spec_algorithm=batch.spec_algorithm)

    def batch_rows(self, batch) -> list:
        return batch.req_pool_indices.tolist()

    def new_handoff_batch(self, case: HandoffCase) -> ScheduleBatch:
        T = case.gamma + 1
        max_len = max(case.seq_lens, default=0) + 2 * T
        pool = ReqToTokenPool(case.pool_size, max_len)
        reqs = [
            Req(rid=i, origin_input_ids=[0] * n, output_ids=case.output_ids(i), req_pool_idx=row,
                kv_committed_len=n + len(case.output_ids(i)) - 1)
            for i, (n, row) in enumerate(zip(case.prompt_lens, case.req_pool_indices))
        ]
        return ScheduleBatch.prebuilt(reqs, pool, speculative_num_draft_tokens=T, enable_overlap=case.enable_overlap,
                                      spec_algorithm=SpeculativeAlgorithm.from_string(case.algorithm))

    def record_relay(self, relay) -> list:
        return _record_relay(relay)

    def admit_handoff(self, batch, future_map) -> None:
        disaggregation.process_prebuilt(batch, future_map)

    def draft_input_view(self, batch):
        return None if batch.spec_info is None else _draft_input_view(batch.spec_info, batch.req_pool_indices)

    def relay_snapshot(self, future_map) -> dict:
        return {k: v for k, v in future_map.snapshot().items() if k in ("output_tokens_buf", "new_seq_lens_buf")}

    def prepare_for_decode(self, batch) -> None:
        batch.prepare_for_decode()

    def resolve_relay(self, batch, future_map) -> ResolvedInputs:
        future_map.resolve_seq_lens(batch)
        future_map.resolve_forward_inputs(batch)
        return ResolvedInputs(
            seq_lens=batch.seq_lens.clone(),
            seq_lens_cpu=None if batch.seq_lens_cpu is None else batch.seq_lens_cpu.clone(),
            seq_lens_sum=batch.seq_lens_sum,
            bonus_tokens=batch.spec_info.bonus_tokens.clone(),
            dsa_topk_indices_is_none=batch.spec_info.dsa_topk_indices is None,
        )
