"""KV reservation bugs in the reference engine's decode step."""

import math

from dspark import mem_cache
from dspark.draft_input import DraftInput

from . import Mutant

_real_prepare = DraftInput.prepare_for_decode
_real_growth = mem_cache._row_growth
_real_extend = mem_cache.extend_rows  # kept at import: the KV adapter rebinds the module's name while it records


def _single_window(self, batch):
    """The reserve sized for one verify window: under overlap the lagged commit then has no slots."""
    T = batch.speculative_num_draft_tokens
    batch.speculative_num_draft_tokens = math.ceil(T / 2)
    try:
        _real_prepare(self, batch)
    finally:
        batch.speculative_num_draft_tokens = T


def _written_twice(self, batch):
    _real_prepare(self, batch)
    for req in batch.reqs:  # a second writer re-stores the length it just read
        req.kv_allocated_len = req.kv_allocated_len


def _shared_slots(row, cur, nxt, page, pages):
    """Every row grows into the same slots (a free list that is read but never popped)."""
    return _real_growth(row, cur, nxt, page, list(range(1, 1 + len(pages))))


def _spill_into_next_row(req_to_token, rows, cur, nxt, allocator):
    drawn = _real_extend(req_to_token, rows, cur, nxt, allocator)
    for r, n in zip(rows, nxt):  # the last slot also lands in the next row, at its first column
        if n and r + 1 < req_to_token.shape[0]:
            req_to_token[r + 1, 0] = req_to_token[r, n - 1]
    return drawn


MUTANTS = [
    Mutant("decode-reserve-one-window", ("KV-001",), lambda mp: mp.setattr(DraftInput, "prepare_for_decode", _single_window)),
    Mutant("slot-write-spills-into-next-row", ("KV-002",), lambda mp: mp.setattr(mem_cache, "extend_rows", _spill_into_next_row)),
    Mutant("slots-shared-across-rows", ("KV-003",), lambda mp: mp.setattr(mem_cache, "_row_growth", _shared_slots)),
    Mutant("allocated-length-written-twice", ("KV-004",), lambda mp: mp.setattr(DraftInput, "prepare_for_decode", _written_twice)),
]
