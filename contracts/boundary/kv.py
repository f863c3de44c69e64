"""KV level: what a decode step reserves in the KV cache, and who writes the allocation lengths.

A case hands a batch of requests over from a prefill server, then runs decode
steps: each step's reservation (the engine's prepare-for-decode), then the
step's commit (each request's committed length grows by what its verify
accepted). Requests are admitted by the engine's own rule and stay decoding for
the whole case, so every reservation is one a serving engine really makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Tuple


@dataclass(frozen=True)
class KvRequest:
    prompt_len: int  # tokens handed over (the committed KV after the handoff)
    max_new_tokens: int  # as admitted: prompt_len + max_new_tokens <= the engine's admission limit


@dataclass(frozen=True)
class KvCase:
    gamma: int  # T = gamma + 1 verify tokens per request and step
    page_size: int
    context_len: int  # the model's context length
    requests: Tuple[KvRequest, ...]
    commits: Tuple[Tuple[int, ...], ...]  # [step][request] tokens a step commits, 1..T; each request stays decoding

    @property
    def num_draft_tokens(self) -> int:
        return self.gamma + 1


@dataclass(frozen=True)
class KvRequestStep:
    committed: int  # committed KV length the reservation saw
    allocated_before: int
    allocated_after: int
    allocated_writes: int  # writes to the request's allocated length during the step's reservation
    row_width: int  # the width of its request-to-token row
    row_slots: Tuple[int, ...]  # the row's KV slots for positions [0, min(allocated_after, row_width))


@dataclass(frozen=True)
class KvStep:
    requests: Tuple[KvRequestStep, ...]
    asked: Tuple[Tuple[int, int], ...]  # (from, to) per request, as the step asked the allocator
    drawn: int  # KV slots the allocator handed out during the step
    other_rows_changed: bool  # a request-to-token row outside the batch changed (row 0, the padding row, excepted)
    error: Optional[str] = None  # the reservation raised (then nothing after it is observed)


class KvLevel(Protocol):
    def kv_admission_limit(self, context_len: int, num_draft_tokens: int, page_size: int) -> int: ...  # longest prompt + max_new
    def kv_prompt_limit(self, context_len: int) -> int: ...  # the longest prompt the scheduler admits on its own
    def kv_page_sizes(self) -> Tuple[int, ...]: ...  # page sizes the engine runs
    def run_kv_steps(self, case: KvCase) -> Tuple[KvStep, ...]: ...  # stops after a step whose reservation raised
