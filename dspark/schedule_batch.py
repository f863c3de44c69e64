"""Scheduler-side batch state: requests, the request-to-token pool, ScheduleBatch.

Mirrors the fields of `sglang/srt/managers/schedule_batch.py` that DSpark
touches. On decode-family rounds `global_num_tokens` holds per-DP-rank
*request* counts; scaling to tokens happens when a ForwardBatch is built.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import List, Optional

import torch

from dspark import _validate
from dspark.spec_info import SpecInput, SpeculativeAlgorithm


class ForwardMode(enum.Enum):
    EXTEND = enum.auto()
    DECODE = enum.auto()
    TARGET_VERIFY = enum.auto()
    DRAFT_EXTEND = enum.auto()
    PREBUILT = enum.auto()  # PD decode side: the KV arrived from the prefill server
    IDLE = enum.auto()  # a DP rank with no requests still joins collectives


@dataclass
class Req:
    rid: int
    origin_input_ids: List[int]
    output_ids: List[int]
    req_pool_idx: int
    kv_committed_len: int
    kv_allocated_len: int = 0
    decode_batch_idx: int = 0
    finished: bool = False


class ReqToTokenPool:
    """`size` request rows, each with room for `max_context_len` token slots."""

    def __init__(self, size: int, max_context_len: int, page_size: int = 1):
        self.size = _validate.positive_int("size", size)
        self.max_context_len = _validate.positive_int("max_context_len", max_context_len)
        self.page_size = _validate.positive_int("page_size", page_size)
        self.req_to_token = torch.zeros(size, max_context_len, dtype=torch.int32)
        # Bumped each time a row is handed to a new request, never reset: readers of per-row history
        # (the confidence relay) tell a row's current request from its previous occupants by it.
        self.req_generation = torch.zeros(size, dtype=torch.int64)

    def take_row(self, row: int) -> int:
        """Hand `row` to a new request: its generation moves on."""
        if isinstance(row, bool) or not isinstance(row, int) or not 0 <= row < self.size:
            raise ValueError(f"row: expected an int in [0, {self.size}), got {row!r}")
        self.req_generation[row] += 1
        return row


@dataclass
class ScheduleBatch:
    reqs: List[Req]
    req_to_token_pool: ReqToTokenPool
    token_to_kv_pool_allocator: Optional[object] = None  # dspark.mem_cache.TokenToKVPoolAllocator; None: lengths only
    spec_algorithm: SpeculativeAlgorithm = SpeculativeAlgorithm.DSPARK
    speculative_num_draft_tokens: int = 1  # T = gamma + 1
    enable_overlap: bool = False
    forward_mode: ForwardMode = ForwardMode.DECODE
    seq_lens: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.int64))
    seq_lens_cpu: Optional[torch.Tensor] = None
    seq_lens_sum: Optional[int] = None
    req_pool_indices: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.int64))
    input_ids: Optional[torch.Tensor] = None
    out_cache_loc: Optional[torch.Tensor] = None
    spec_info: Optional[SpecInput] = None
    # DP attention: per-rank counts gathered by the scheduler
    global_num_tokens: Optional[List[int]] = None
    global_num_tokens_for_logprob: Optional[List[int]] = None
    draft_global_num_tokens: Optional[List[int]] = None
    draft_global_num_tokens_for_logprob: Optional[List[int]] = None
    dp_spec_prefill_coordination_applied: bool = False
    is_extend_in_batch: bool = False
    can_run_decode_cuda_graph: bool = False
    can_run_dp_draft_cuda_graph: bool = False
    spec_verify_tier_num_tokens: int = -1
    global_spec_verify_tier_num_tokens: Optional[List[int]] = None

    @classmethod
    def prebuilt(
        cls,
        reqs: List[Req],
        pool: ReqToTokenPool,
        *,
        spec_algorithm: SpeculativeAlgorithm = SpeculativeAlgorithm.DSPARK,
        speculative_num_draft_tokens: int = 1,
        enable_overlap: bool = False,
        token_to_kv_pool_allocator=None,
    ) -> "ScheduleBatch":
        """The decode-side batch for requests whose KV arrived from a prefill server."""
        _validate.positive_int("speculative_num_draft_tokens", speculative_num_draft_tokens)
        for r in reqs:  # torch.tensor would truncate a float row silently
            _validate.integer(f"reqs[{r.rid}].req_pool_idx", r.req_pool_idx)
        pool_idx = torch.tensor([r.req_pool_idx for r in reqs], dtype=torch.int64)
        _validate.in_range("req_pool_indices", pool_idx, 0, pool.size)
        _validate.unique("req_pool_indices", pool_idx)
        committed = []
        for r in reqs:
            if not r.output_ids:
                raise ValueError(f"reqs[{r.rid}].output_ids: a prebuilt request carries its first sampled token")
            if r.kv_committed_len > pool.max_context_len:
                raise ValueError(f"reqs[{r.rid}].kv_committed_len: {r.kv_committed_len} exceeds the pool slot ({pool.max_context_len})")
            # The KV holds every transferred token but the last sampled one, the first decode's anchor.
            committed.append(len(r.origin_input_ids) + len(r.output_ids) - 1)
            if r.kv_committed_len != committed[-1]:
                raise ValueError(f"reqs[{r.rid}].kv_committed_len: {r.kv_committed_len}, but the prompt and all outputs "
                                 f"but the last make {committed[-1]}")
        seq_lens = torch.tensor(committed, dtype=torch.int64)
        return cls(
            reqs=list(reqs),
            req_to_token_pool=pool,
            token_to_kv_pool_allocator=token_to_kv_pool_allocator,
            spec_algorithm=spec_algorithm,
            speculative_num_draft_tokens=speculative_num_draft_tokens,
            enable_overlap=enable_overlap,
            forward_mode=ForwardMode.PREBUILT,
            seq_lens=seq_lens,
            seq_lens_cpu=seq_lens.clone(),
            seq_lens_sum=int(seq_lens.sum()),
            req_pool_indices=pool_idx,
        )

    def batch_size(self) -> int:
        return len(self.reqs)

    def is_empty(self) -> bool:
        return not self.reqs

    def prepare_for_decode(self) -> None:
        """First step of every decode round (SGLang: spec_prepare_for_decode).

        Deliberately no None guard: a missing draft input must fail here, as it
        did in production, not be papered over.
        """
        mode = ForwardMode.IDLE if self.is_empty() else ForwardMode.DECODE
        if not self.spec_algorithm.is_none():
            self.spec_info.prepare_for_decode(self)  # may refuse the reservation: the mode changes only after it
        self.forward_mode = mode
