"""What the reference engine takes and returns: sampling settings, requests, per-request state,
the PD prefill handoff record, and the per-step record.

Mirrors the fields of SGLang's `Req` / `SamplingParams` and DSpark's `DecodeStepRecord` that the
reference engine models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from dspark.mem_cache import DraftContextPool
from dspark.penalties import PenaltyLedger
from dspark.schedule_batch import Req

SAMPLING_EPS = 1e-6


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0  # 0 = off; 1 = greedy
    max_new_tokens: int = 16
    eos_id: Optional[int] = None
    top_p: float = 1.0  # 1 = off
    # The parameters that read the request's history (dspark.penalties), SGLang's names; the defaults are off.
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    min_p: float = 0.0
    logit_bias: tuple = ()  # (token id, bias) pairs
    stop_token_ids: tuple = ()
    ignore_eos: bool = False

    @property
    def stop_ids(self) -> frozenset:
        """The tokens that end the request when emitted."""
        eos = () if self.eos_id is None or self.ignore_eos else (self.eos_id,)
        return frozenset(eos) | frozenset(self.stop_token_ids)

    @property
    def is_greedy(self) -> bool:
        # SGLang's rule: a temperature below 1e-6 samples as greedy (top_k = 1); dividing logits by it would overflow.
        return self.temperature < SAMPLING_EPS or self.top_k == 1


@dataclass(frozen=True)
class Request:
    rid: int
    prompt: tuple
    params: SamplingParams = SamplingParams()


@dataclass
class RequestState:
    rid: int
    prompt: list
    params: SamplingParams
    req: Req
    cache_tokens: list  # target KV: the committed sequence, pending anchor excluded
    kept_draft_ctx: Optional[torch.Tensor]  # the draft context while out of the engine's pool (done, or never admitted)
    output: list = field(default_factory=list)  # emitted tokens (the first sampled token included)
    local_step: int = 0  # decode steps this request has taken
    finish_reason: Optional[str] = None  # "eos" | "stop" | "length" | "abort"
    ledger: Optional[PenaltyLedger] = None  # the output history its parameters read (set on admission)
    draft_pool: Optional[DraftContextPool] = None  # while live: the pool whose row `pool_row` holds the draft context

    @property
    def pool_row(self) -> int:
        return self.req.req_pool_idx

    @property
    def draft_ctx(self) -> torch.Tensor:
        """Draft context KV: one projected target hidden per committed position. While the request is live, a view
        of its pool row (the next step writes there; clone it to keep this step's)."""
        return self.kept_draft_ctx if self.draft_pool is None else self.draft_pool.context(self.pool_row)


@dataclass(frozen=True)
class PrefillHandoff:
    """What a prefill server hands a decode server: committed length, the KV, the first sampled token."""

    rid: int
    prompt: tuple
    params: SamplingParams
    committed_len: int
    first_token: int
    kv_tokens: tuple
    kv_hiddens: torch.Tensor


@dataclass
class StepLaws:
    """One sampled request's laws in a step: the target and draft laws its accept read, and the drafter's draw."""

    rid: int
    cache: list  # the request's committed tokens (append-only: a step only extends it) ...
    context_len: int  # ... of which the first context_len stood before this step's anchor
    candidates: list  # [T] the anchor, then the drafts
    params: "SamplingParams"
    target_probs: torch.Tensor  # [T, V]
    draft_probs: torch.Tensor  # [gamma, V]
    draft_logits: torch.Tensor  # [gamma, V] the drafter's logits for each slot
    draft_temperature: float
    draft_noise: torch.Tensor  # [gamma, V] Gumbel noise: draft k = argmax(draft_logits[k] / T + draft_noise[k])

    @property
    def context(self) -> tuple:
        """The committed tokens before the anchor (the target cache); copied only when asked for, not every step."""
        return tuple(self.cache[: self.context_len])


@dataclass
class StepRecord:
    step: int
    rids: list
    seq_lens: list  # committed lengths before the step
    verify_lens: list  # L per request (gamma + 1 where not planned)
    planned: list  # whether the planner set L (False: static mode, or a fresh request verifying all)
    budget: Optional[int]  # extra verify tokens granted to the planned rows; None when none were planned
    correct_lens: list  # accepted drafts (accept lens, bonus excluded)
    cap_trim: list
    commit_lens: list
    new_seq_lens: list
    emitted: list  # per request, the tokens it got this step (after EOS / max_new_tokens truncation)
    finished: list  # rids that left the batch after this step
    overlap: bool
    target_tokens: int  # rows the target forward computed
    graph_num_tokens: Optional[int] = None
    budget_confidence: Optional[list] = None  # per row, the lagged confidence the budget read (1s: no own history)

    @property
    def tokens_per_forward(self) -> float:
        return sum(self.commit_lens) / max(len(self.rids), 1)
