"""Relay-on-streams level: the engine's confidence relay run on a stream surface the harness hands it.

The harness builds a `contracts.streams.StreamModel` from the case's schedule and passes it in; the engine uses it
wherever its relay relies on device asynchrony (its streams, events, non-blocking copies, record_stream), declaring
what each op and host access touches. The model decides when enqueued work completes and reports races.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from contracts.boundary.relay import RelayCase, RelayStep  # noqa: F401 (a case's repr names them)
from contracts.streams.schedule import Schedule, Stall  # noqa: F401


@dataclass(frozen=True)
class StreamRelayCase:
    relay: RelayCase  # who is in which step (overlap on: the relay, not the planner's carry)
    schedule: Schedule  # which streams make no progress before which host actions


class StreamRelayLevel(Protocol):
    confidence_relay_lag: int

    # One RelayRead per step, as run_confidence_relay, with every stream operation of the relay on `streams`.
    def run_confidence_relay_on(self, case: RelayCase, streams) -> list: ...
