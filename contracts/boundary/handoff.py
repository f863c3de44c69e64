"""Handoff level: a PD prefill handoff into a decode batch, and the FutureMap relay."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Tuple

import torch


@dataclass(frozen=True)
class HandoffCase:
    """What the prefill server hands over, in batch order."""

    prompt_lens: Tuple[int, ...]  # prompt tokens per request (>= 1)
    req_pool_indices: Tuple[int, ...]  # distinct pool rows
    bonus_tokens: Tuple[int, ...]  # each request's last sampled token, the pending anchor of its first decode
    enable_overlap: bool
    pool_size: int
    gamma: int = 5
    algorithm: str = "dspark"  # a DFlash-family algorithm: "dspark" or "dflash"
    # Tokens already sampled per request, the bonus last (() = one each). More than one: a request retracted and
    # prefilled again carries its earlier outputs.
    output_lens: Tuple[int, ...] = ()

    @property
    def bs(self) -> int:
        return len(self.prompt_lens)

    @property
    def outputs(self) -> Tuple[int, ...]:
        return self.output_lens or (1,) * self.bs

    @property
    def seq_lens(self) -> Tuple[int, ...]:
        """Committed KV lengths: the KV holds every handed-over token but the pending last one."""
        return tuple(p + o - 1 for p, o in zip(self.prompt_lens, self.outputs))

    def output_ids(self, i: int) -> list:
        """Request i's sampled tokens: earlier outputs (arbitrary ids), then its bonus token."""
        return [7 + k for k in range(self.outputs[i] - 1)] + [self.bonus_tokens[i]]


@dataclass
class DraftInputView:
    """The decode-side draft input as the contracts see it."""

    is_draft_input: bool
    bonus_tokens: torch.Tensor
    new_seq_lens: torch.Tensor
    future_indices: Optional[torch.Tensor]
    future_indices_is_req_pool_indices: bool  # the relay rows are the batch's pool-row tensor itself (SGLang seeds it so)
    future_dsa_topk_indices_available: bool


@dataclass
class RelayEvent:
    op: str  # "publish" (values = seq lens) or "stash" (values = bonus tokens)
    indices: list
    values: list


@dataclass
class ResolvedInputs:
    seq_lens: torch.Tensor
    seq_lens_cpu: Optional[torch.Tensor]
    seq_lens_sum: Optional[int]
    bonus_tokens: torch.Tensor
    dsa_topk_indices_is_none: bool


@dataclass
class HandoffObservation:
    draft_input: Optional[DraftInputView]
    rows: list = field(default_factory=list)  # the request-pool rows of the batch
    relay_events: list = field(default_factory=list)
    relay_before: dict = field(default_factory=dict)  # buffer name -> tensor
    relay_after: dict = field(default_factory=dict)
    handoff_error: Optional[str] = None
    first_decode_error: Optional[str] = None
    resolved: Optional[ResolvedInputs] = None
    resolve_error: Optional[str] = None


class HandoffLevel(Protocol):
    """Thin conversions only: the scenario itself lives in `contracts.scenarios`. Each pack maps its engine's names
    (SGLang and the reference: ScheduleBatch.process_prebuilt, FutureMap.publish / stash) onto these."""

    handoff_algorithms: Tuple[str, ...]  # the DFlash-family algorithms whose handoff the engine builds
    def new_handoff_batch(self, case: HandoffCase) -> Any: ...  # the decode batch as the handoff leaves it, not yet admitted
    def batch_rows(self, batch) -> list: ...  # the request-pool rows the engine gave the requests, batch order
    def new_relay(self, batch) -> Any: ...  # the engine's step-to-step relay (FutureMap) over the batch's pool
    def record_relay(self, relay) -> list: ...  # a live list the relay's writes append RelayEvents to; they still run
    def admit_handoff(self, batch, relay) -> None: ...  # the decode side builds the batch's draft input, seeds the relay
    def draft_input_view(self, batch) -> Optional[DraftInputView]: ...  # None when the batch has no draft input
    def relay_snapshot(self, relay) -> dict: ...  # {"output_tokens_buf": ..., "new_seq_lens_buf": ...}
    def prepare_for_decode(self, batch) -> None: ...  # the first decode step's preparation
    def resolve_relay(self, batch, relay) -> ResolvedInputs: ...  # what the first overlap decode reads
