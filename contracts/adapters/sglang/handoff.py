"""Handoff level on SGLang: a PD decode batch built as the decode server builds it, and the real FutureMap."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from contracts.adapters.sglang.runtime import CPU, Pools, cpu_kernels, runtime
from contracts.boundary.handoff import DraftInputView, HandoffCase, RelayEvent, ResolvedInputs

ALGORITHMS = {"dspark": "DSPARK", "dflash": "DFLASH"}  # the DFlash family SGLang dispatches in build_disagg_draft_input


@dataclass
class PrebuiltBatch:
    """SGLang's ScheduleBatch plus what the decode server configured around it."""

    batch: object
    pools: Pools
    num_draft_tokens: int


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


class SGLangHandoff:
    handoff_algorithms = tuple(ALGORITHMS)

    def new_handoff_batch(self, case: HandoffCase) -> PrebuiltBatch:
        rt = runtime()
        T = case.gamma + 1
        # Room for the handed-over KV and each request's decode reserve (2T, page-rounded).
        pools = rt.pools(pool_size=case.pool_size, kv_slots=sum(case.seq_lens) + case.bs * (2 * T + 1) + 1)
        with rt.config(num_draft_tokens=T):
            reqs = [rt.prebuilt_request(pools, f"r{i}", n, case.output_ids(i)) for i, n in enumerate(case.prompt_lens)]
            batch = rt.schedule_batch(pools, reqs, enable_overlap=case.enable_overlap, algorithm=ALGORITHMS[case.algorithm])
            batch.prepare_for_prebuilt()
        return PrebuiltBatch(batch, pools, T)

    def batch_rows(self, handle: PrebuiltBatch) -> list:
        return [int(r) for r in handle.batch.req_pool_indices.tolist()]

    def new_relay(self, handle: PrebuiltBatch):
        from sglang.srt.managers.overlap_utils import FutureMap

        b = handle.batch
        fm = FutureMap(CPU, b.spec_algorithm, handle.pools.req_to_token_pool, needs_cpu_seq_lens=True)
        # SGLang poisons these rows only under SGLANG_IS_IN_CI; poisoned rows make a stale read show as -1.
        fm.new_seq_lens_buf.fill_(-1)
        fm.output_tokens_buf.fill_(-1)
        return fm

    def record_relay(self, relay) -> list:
        return _record_relay(relay)

    def admit_handoff(self, handle: PrebuiltBatch, future_map) -> None:
        with runtime().config(num_draft_tokens=handle.num_draft_tokens):
            handle.batch.process_prebuilt(future_map)

    def draft_input_view(self, handle: PrebuiltBatch):
        b = handle.batch
        return None if b.spec_info is None else _draft_input_view(b.spec_info, b.req_pool_indices)

    def relay_snapshot(self, future_map) -> dict:
        return {"output_tokens_buf": future_map.output_tokens_buf.clone(), "new_seq_lens_buf": future_map.new_seq_lens_buf.clone()}

    def prepare_for_decode(self, handle: PrebuiltBatch) -> None:
        # ScheduleBatch.prepare_for_decode -> spec_prepare_for_decode -> the draft input's own reservation.
        with runtime().config(num_draft_tokens=handle.num_draft_tokens), cpu_kernels():
            handle.batch.prepare_for_decode()

    def resolve_relay(self, handle: PrebuiltBatch, future_map) -> ResolvedInputs:
        from sglang.srt.managers.overlap_utils import resolve_forward_inputs

        b = handle.batch
        future_map.resolve_seq_lens_cpu(b)  # the scheduler's order in run_batch: seq lens, then the forward inputs
        resolve_forward_inputs(b, future_map)
        si = b.spec_info
        return ResolvedInputs(
            seq_lens=b.seq_lens.clone(),
            seq_lens_cpu=None if b.seq_lens_cpu is None else torch.as_tensor(b.seq_lens_cpu).clone(),
            seq_lens_sum=b.seq_lens_sum,
            bonus_tokens=si.bonus_tokens.clone(),
            dsa_topk_indices_is_none=si.dsa_topk_indices is None,
        )
