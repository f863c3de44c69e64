"""Confidence relay level: what a step's verify budget reads of the draft confidence of earlier steps.

A case is a run of decode steps over a small request pool: before each step some requests leave (their rows
are freed) and some join (each takes a free row, so rows are reused). A request may take its row some steps before
it joins (`prealloc`: a PD decode server allocates the row when the KV transfer starts, and the running batch keeps
decoding until the transfer completes) in a case marked `pd_decode`; only engines that declare `relay.prealloc` are
given such cases. Every live request drafts in every
step with the confidence `RelayCase.confidence(rid, step)`, a function of the case alone. The engine reports,
per step, the per-row survival its budget read: the running product of a row's relayed confidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Tuple


@dataclass(frozen=True, repr=False)
class RelayStep:
    leave: Tuple[int, ...] = ()  # rids whose rows are freed before the step
    join: Tuple[int, ...] = ()  # new rids, each taking a free row before the step (unless it took one earlier)
    prealloc: Tuple[int, ...] = ()  # rids taking a free row before the step (after `leave`) that join a later step

    def __repr__(self) -> str:  # a repro line names prealloc only where a case has it
        extra = f", prealloc={self.prealloc!r}" if self.prealloc else ""
        return f"RelayStep(leave={self.leave!r}, join={self.join!r}{extra})"


@dataclass(frozen=True, repr=False)
class RelayCase:
    pool_size: int
    gamma: int
    overlap: bool  # the relay (overlap scheduling) or the planner's own carry
    steps: Tuple[RelayStep, ...]
    # Every request joins a PD decode server (relay.prealloc): its row is taken as that server takes it, at its
    # `prealloc` step or else at its join. False: rows are taken as a local (prefill-and-decode) server takes them.
    pd_decode: bool = False

    def __repr__(self) -> str:  # a repro line names pd_decode only where a case has it
        extra = ", pd_decode=True" if self.pd_decode else ""
        return (f"RelayCase(pool_size={self.pool_size!r}, gamma={self.gamma!r}, overlap={self.overlap!r}, "
                f"steps={self.steps!r}{extra})")

    def confidence(self, rid: int, step: int) -> list:
        """The draft confidence of request `rid` at `step`: distinct per (rid, step), in (0, 1), exact in float32."""
        return [(1 + (rid * 7 + step * 3 + k) % 13) / 16 for k in range(self.gamma)]

    def taken(self) -> dict:
        """rid -> the step before which its row is taken: its `prealloc` step, else its join step."""
        out = {}
        for s, step in enumerate(self.steps):
            for rid in step.prealloc:
                out.setdefault(rid, s)
            for rid in step.join:
                out.setdefault(rid, s)
        return out

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
