"""Confidence relay level: what a step's verify budget reads of the draft confidence of earlier steps.

A case is a run of decode steps over a small request pool: before each step some requests leave (their rows
are freed) and some join (each takes a free row, so rows are reused). Every live request drafts in every
step with the confidence `RelayCase.confidence(rid, step)`, a function of the case alone. The engine reports,
per step, the per-row survival its budget read: the running product of a row's relayed confidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Tuple


@dataclass(frozen=True)
class RelayStep:
    leave: Tuple[int, ...] = ()  # rids whose rows are freed before the step
    join: Tuple[int, ...] = ()  # new rids, each taking a free row before the step


@dataclass(frozen=True)
class RelayCase:
    pool_size: int
    gamma: int
    overlap: bool  # the relay (overlap scheduling) or the planner's own carry
    steps: Tuple[RelayStep, ...]

    def confidence(self, rid: int, step: int) -> list:
        """The draft confidence of request `rid` at `step`: distinct per (rid, step), in (0, 1), exact in float32."""
        return [(1 + (rid * 7 + step * 3 + k) % 13) / 16 for k in range(self.gamma)]

    def batches(self) -> list:
        """The live rids of each step, in the order they joined."""
        live, out = [], []
        for s in self.steps:
            live = [r for r in live if r not in s.leave] + list(s.join)
            out.append(tuple(live))
        return out


@dataclass
class RelayRead:
    rids: Tuple[int, ...]
    survival: Optional[list]  # [bs][gamma] what the budget read; None: no budget this step (nothing resolved)


class ConfidenceRelayLevel(Protocol):
    confidence_relay_lag: int  # steps between a confidence's draft and the budget that reads it

    def run_confidence_relay(self, case: RelayCase) -> list: ...  # one RelayRead per step
