"""PD disaggregation, decode side: turn a prefill handoff into a draft input.

Mirrors `sglang/srt/speculative/dspark_disaggregation.py` and
`ScheduleBatchDisaggregationDecodeMixin.process_prebuilt`. The prefill server
hands over committed lengths, pool slots and the first sampled token; the first
sampled token becomes the first anchor (bonus).
"""

from __future__ import annotations

import torch

from dspark import _validate
from dspark.draft_input import DraftInput
from dspark.overlap_utils import FutureMap, RelayPayload


def _check_handoff(batch, last_tokens_tensor, future_map) -> None:
    _validate.int_tensor("batch.seq_lens", batch.seq_lens, nonnegative=True)
    _validate.int_tensor("batch.req_pool_indices", batch.req_pool_indices, nonnegative=True)
    _validate.int_tensor("last_tokens_tensor", last_tokens_tensor)
    _validate.same_length(
        seq_lens=batch.seq_lens, req_pool_indices=batch.req_pool_indices, last_tokens_tensor=last_tokens_tensor
    )
    if batch.enable_overlap:
        if not isinstance(future_map, FutureMap):
            raise TypeError(f"future_map: overlap is on, expected a FutureMap, got {type(future_map).__name__}")
        _validate.in_range("batch.req_pool_indices", batch.req_pool_indices, 0, future_map.req_pool_size)
        _validate.unique("batch.req_pool_indices", batch.req_pool_indices)


def _seed_relay(batch, spec_info: DraftInput, payload: RelayPayload, future_map: FutureMap) -> None:
    # Seq lens are published before the bonus is stashed, so the first
    # overlap decode resolves both rows fresh.
    future_map.publish(batch.req_pool_indices, batch.seq_lens)
    future_map.stash(batch.req_pool_indices, payload)


def build_dspark_disagg_draft_input(batch, last_tokens_tensor: torch.Tensor, future_map) -> DraftInput:
    _check_handoff(batch, last_tokens_tensor, future_map)
    spec_info = DraftInput(
        bonus_tokens=last_tokens_tensor.to(torch.int64),
        new_seq_lens=batch.seq_lens.to(torch.int64),
        future_indices=batch.req_pool_indices if batch.enable_overlap else None,
        # Nothing relayed DSA top-k indices for these rows: claiming so would
        # make the first resolve read a buffer that was never written.
        future_dsa_topk_indices_available=False,
    )
    if batch.enable_overlap:
        _seed_relay(batch, spec_info, RelayPayload.from_draft_input(spec_info), future_map)
    return spec_info


def build_dflash_disagg_draft_input(batch, last_tokens_tensor: torch.Tensor, future_map) -> DraftInput:
    _check_handoff(batch, last_tokens_tensor, future_map)
    spec_info = DraftInput(
        bonus_tokens=last_tokens_tensor.to(torch.int64),
        new_seq_lens=batch.seq_lens.to(torch.int64),
        future_indices=batch.req_pool_indices if batch.enable_overlap else None,
    )
    if batch.enable_overlap:
        _seed_relay(batch, spec_info, RelayPayload(bonus_tokens=spec_info.bonus_tokens), future_map)
    return spec_info


def process_prebuilt(batch, future_map) -> None:
    """Decode-side entry for a PREBUILT batch: set up `batch.spec_info` (or the relay)."""
    for req in batch.reqs:
        if not req.output_ids:
            raise ValueError(f"batch.reqs[{req.rid}].output_ids: empty; the handoff must carry the first sampled token")
        _validate.integer(f"batch.reqs[{req.rid}].output_ids[-1]", req.output_ids[-1])  # torch.tensor would truncate 5.9
    last_tokens = torch.tensor([req.output_ids[-1] for req in batch.reqs], dtype=torch.int64)
    if batch.spec_algorithm.is_none():
        if batch.enable_overlap:
            if not isinstance(future_map, FutureMap):
                raise TypeError(f"future_map: overlap is on, expected a FutureMap, got {type(future_map).__name__}")
            future_map.stash(batch.req_pool_indices, RelayPayload(bonus_tokens=last_tokens))
        batch.input_ids = None
        return
    batch.spec_info = batch.spec_algorithm.build_disagg_draft_input(batch, last_tokens, future_map)
