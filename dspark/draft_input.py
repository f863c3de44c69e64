"""The draft-side state carried between decode steps.

SGLang has no DSpark-specific class: DSpark reuses DFlash's spec-v2 dataclass
(`dflash_info_v2.DFlashDraftInputV2`), so the reference keeps that alias.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from dspark import _validate, mem_cache
from dspark.spec_info import SpecInput

_PER_REQUEST = ("bonus_tokens", "new_seq_lens", "topk_p", "topk_index", "hidden_states")


def _empty(bs: int, dtype: torch.dtype, device) -> torch.Tensor:
    return torch.empty((bs, 0), dtype=dtype, device=device)


@dataclass
class DraftInput(SpecInput):
    bonus_tokens: torch.Tensor  # [bs] int64: the last emitted token = next block's anchor
    new_seq_lens: torch.Tensor  # [bs] int64: committed KV length, anchor excluded
    future_indices: Optional[torch.Tensor] = None  # FutureMap rows (= req_pool_indices) when overlap is on
    future_dsa_topk_indices_available: bool = False
    verify_token_budget: Optional[int] = None  # set by the planner each step
    topk_p: Optional[torch.Tensor] = None  # EAGLE legacy, always [bs, 0]
    topk_index: Optional[torch.Tensor] = None
    hidden_states: Optional[torch.Tensor] = None
    nxt_kv_lens_cpu: Optional[torch.Tensor] = None
    nxt_kv_lens_sum: Optional[int] = None
    confidence: Optional[torch.Tensor] = field(default=None, repr=False)  # [bs, gamma], for the planner

    def __post_init__(self):
        _validate.int_tensor("bonus_tokens", self.bonus_tokens)
        _validate.int_tensor("new_seq_lens", self.new_seq_lens, nonnegative=True)
        _validate.same_length(bonus_tokens=self.bonus_tokens, new_seq_lens=self.new_seq_lens)
        if self.future_indices is not None:  # one relay row per request, each its own
            _validate.int_tensor("future_indices", self.future_indices, nonnegative=True)
            _validate.same_length(bonus_tokens=self.bonus_tokens, future_indices=self.future_indices)
            _validate.unique("future_indices", self.future_indices)
        if self.nxt_kv_lens_cpu is not None:
            _validate.int_tensor("nxt_kv_lens_cpu", self.nxt_kv_lens_cpu, nonnegative=True)
            _validate.same_length(bonus_tokens=self.bonus_tokens, nxt_kv_lens_cpu=self.nxt_kv_lens_cpu)
        if self.confidence is not None:
            _validate.matrix("confidence", self.confidence, rows=self.bonus_tokens.shape[0])
        self.bonus_tokens = self.bonus_tokens.to(torch.int64)
        self.new_seq_lens = self.new_seq_lens.to(torch.int64)
        bs, device = self.bonus_tokens.shape[0], self.bonus_tokens.device
        for name in _PER_REQUEST[2:]:  # the side tensors have one row per request too
            t = getattr(self, name)
            if t is not None and (not isinstance(t, torch.Tensor) or t.dim() < 1 or t.shape[0] != bs):
                raise ValueError(f"{name}: expected a tensor with {bs} rows (one per request)")
        self.topk_p = _empty(bs, torch.float32, device) if self.topk_p is None else self.topk_p
        self.topk_index = _empty(bs, torch.int64, device) if self.topk_index is None else self.topk_index
        self.hidden_states = _empty(bs, torch.float16, device) if self.hidden_states is None else self.hidden_states
        # A draft state does not change token accounting.
        self.num_tokens_per_req = 1
        self.num_tokens_for_logprob_per_req = 1

    def is_draft_input(self) -> bool:
        return True

    @classmethod
    def create_idle_input(cls, device: str | torch.device = "cpu") -> "DraftInput":
        empty = torch.empty(0, dtype=torch.int64, device=device)
        return cls(bonus_tokens=empty, new_seq_lens=empty.clone())

    def prepare_for_decode(self, batch) -> None:
        """Reserve KV for the next verify window and expose committed lengths.

        Per request: `nxt = max(allocated, ceil_page(committed + 2T))`, so
        allocations never shrink and the window [committed, committed+T) always
        has slots, even when the committed length lags one step under overlap.
        With an allocator on the batch, rows [allocated, nxt) of the
        request-to-token table get KV slots. All requests are checked before
        any is changed.
        """
        bs = batch.batch_size()
        if bs == 0:
            return
        T = batch.speculative_num_draft_tokens
        pool = batch.req_to_token_pool
        allocator = batch.token_to_kv_pool_allocator
        page = pool.page_size if allocator is None else allocator.page_size
        plans = []
        for req in batch.reqs:
            need = -(-(req.kv_committed_len + 2 * T) // page) * page
            nxt = max(req.kv_allocated_len, need)
            if nxt > pool.max_context_len:
                raise ValueError(
                    f"reqs[{req.rid}].kv_committed_len: {req.kv_committed_len} + 2*{T} verify slots "
                    f"exceeds its pool slot ({pool.max_context_len})"
                )
            plans.append(nxt)
        if allocator is not None:
            mem_cache.extend_rows(pool.req_to_token, [r.req_pool_idx for r in batch.reqs],
                                  [r.kv_allocated_len for r in batch.reqs], plans, allocator)
        for req, nxt in zip(batch.reqs, plans):
            req.kv_allocated_len = nxt
            req.decode_batch_idx += 1
        self.nxt_kv_lens_cpu = torch.tensor(plans, dtype=torch.int32)
        self.nxt_kv_lens_sum = int(sum(plans))
        committed = torch.tensor([r.kv_committed_len for r in batch.reqs], dtype=torch.int64)
        batch.seq_lens_cpu = committed
        batch.seq_lens_sum = int(committed.sum())

    def filter_batch(self, new_indices: torch.Tensor) -> None:
        """Keep the rows `new_indices` (finished requests leave the batch).

        With overlap on, the other tensors are stale by design (the relay holds
        the live values), so only `future_indices` is re-indexed.
        """
        _validate.int_tensor("new_indices", new_indices)
        bs = self.bonus_tokens.shape[0] if self.future_indices is None else self.future_indices.shape[0]
        if bs == 0 and new_indices.numel():
            raise ValueError(f"new_indices: the batch is empty, got {new_indices.tolist()}")
        _validate.in_range("new_indices", new_indices, 0, max(bs, 1))
        _validate.unique("new_indices", new_indices)  # a repeated index would duplicate a request
        names = ["future_indices"] if self.future_indices is not None else list(_PER_REQUEST)
        names += [n for n in ("nxt_kv_lens_cpu", "confidence") if getattr(self, n) is not None]
        for name in names:  # a field set after construction may have lost its rows: refused before any is cut
            if getattr(self, name).shape[0] != bs:
                raise ValueError(f"{name}: {getattr(self, name).shape[0]} rows, but the batch holds {bs} requests")
        for name in names:
            setattr(self, name, getattr(self, name)[new_indices])
        if self.nxt_kv_lens_cpu is not None:
            self.nxt_kv_lens_sum = int(self.nxt_kv_lens_cpu.sum())

    def merge_batch(self, other: "DraftInput") -> None:
        """Append `other`'s requests (new requests join the running batch)."""
        if not isinstance(other, DraftInput):
            raise TypeError(f"other: expected DraftInput, got {type(other).__name__}")
        if (self.future_indices is None) != (other.future_indices is None):
            raise ValueError("other.future_indices: both sides must agree on whether the overlap relay is used")
        if self.future_indices is not None:  # two requests on one relay row would read each other's results
            _validate.unique("other.future_indices", torch.cat([self.future_indices, other.future_indices]))
        merged = {}
        for name in _PER_REQUEST:  # every field joined before any is replaced: a refused merge changes nothing
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine.shape[1:] != theirs.shape[1:] or mine.dtype != theirs.dtype:
                raise ValueError(f"other.{name}: {theirs.dtype} {list(theirs.shape)} does not join {mine.dtype} "
                                 f"{list(mine.shape)}")
            merged[name] = torch.cat([mine, theirs])
        for name, value in merged.items():
            setattr(self, name, value)
        if self.future_indices is not None:
            self.future_indices = torch.cat([self.future_indices, other.future_indices])
        if self.nxt_kv_lens_cpu is not None and other.nxt_kv_lens_cpu is not None:
            self.nxt_kv_lens_cpu = torch.cat([self.nxt_kv_lens_cpu, other.nxt_kv_lens_cpu])
            self.nxt_kv_lens_sum = int(self.nxt_kv_lens_cpu.sum())
        else:
            self.nxt_kv_lens_cpu, self.nxt_kv_lens_sum = None, None
        self.confidence = None  # confidences of different steps do not mix


DFlashDraftInputV2 = DraftInput  # SGLang's name
