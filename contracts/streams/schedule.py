"""A schedule: which streams make no progress before which host actions.

The model completes enqueued work only between host actions. Before host action i every stream drains as far as its
event waits allow, except the streams a `Stall` covering i names: their work stays pending. No stalls is the happy
order a CPU run collapses into (all work done before the host looks again). Each stall is one deviation from it, so
a shrunk schedule is the fewest, earliest, shortest deviations that still fail (CHESS's preemption bound, loom's
minimal interleaving). A host synchronize still waits for what it needs: a stall delays work, it never blocks a wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple


@dataclass(frozen=True)
class Stall:
    start: int  # the first host action (0-based) before which the streams make no progress
    length: int  # how many host actions the stall covers
    streams: int  # bit k set: the (k+1)-th stream the program created is stalled
    default: bool = False  # the default stream is stalled too (last, so that a shrunk stall names side streams)

    def covers(self, action: int) -> bool:
        return self.start <= action < self.start + self.length

    def holds(self, stream_id: int) -> bool:
        """Whether the stall holds stream `stream_id` (0: the default stream, then in creation order)."""
        return self.default if stream_id == 0 else bool(self.streams >> (stream_id - 1) & 1)


@dataclass(frozen=True)
class Schedule:
    stalls: Tuple[Stall, ...] = ()

    def stalled(self, action: int) -> frozenset:
        """The ids of the streams held back before host action `action` (0: the default stream)."""
        live = [s for s in self.stalls if s.covers(action)]
        if not live:
            return frozenset()
        return frozenset(k for k in range(max(s.streams.bit_length() for s in live) + 1) if any(s.holds(k) for s in live))

    def describe(self, stream_names) -> str:
        """`eager (no stalls)` or `stall copy before host actions 3..4; ...`, with the streams' names."""
        if not self.stalls:
            return "eager (no stalls: every op completes before the next host action)"
        parts = []
        for s in self.stalls:
            names = [n for k, n in enumerate(stream_names) if s.holds(k)] or [f"streams {s.streams}"]
            span = f"{s.start}" if s.length == 1 else f"{s.start}..{s.start + s.length - 1}"
            parts.append(f"stall {'+'.join(names)} before host action{'s' if s.length > 1 else ''} {span}")
        return "; ".join(parts)


EAGER = Schedule()
