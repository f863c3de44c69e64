"""Contracts under explored stream schedules: the relay's device asynchrony, not the CPU's happy order.

Each case pairs a scenario with a schedule for `contracts.streams.StreamModel`, which the engine runs its
asynchronous path on. Two things must hold under every schedule: the model finds no race in what the engine
enqueued and read (a host read of a pending write, a write into memory a pending op reads, unordered accesses
across streams, a wait on an unrecorded event, a self-wait, a starving wait), and the scenario's own contract.
"""

from __future__ import annotations

from contracts.catalog.relay import expect_own_lagged_reads
from contracts.checks import expect
from contracts.protocol import RELAY, RELAY_STREAMS
from contracts.registry import contract
from contracts.strategies.schedules import stream_relay_cases
from contracts.streams import StreamDeadlock, StreamModel, UnsupportedStreamOp
from contracts.violation import Mismatch


def run_on_model(schedule, run):
    """`run(model)` on a StreamModel of `schedule`; a race, a deadlock or an unsupported operation is a Mismatch
    naming the operations and the schedule."""
    model = StreamModel(schedule)
    try:
        out = run(model)
    except StreamDeadlock as e:
        raise Mismatch("stream schedule", "the host's waits complete", f"deadlock: {e}") from None
    except UnsupportedStreamOp as e:
        raise Mismatch("stream operation", "one the stream model supports", str(e)) from None
    races = model.violations
    expect(not races, "stream races", "none",
           f"{races[0]}" + (f" (and {len(races) - 1} more)" if len(races) > 1 else "") if races else "")
    return out


@contract("STREAM-001", "RELAY-001 holds under every schedule of the relay's streams (its copies complete when the "
          "schedule says, not at once), and the relay's stream program has no race: no host read of memory a pending "
          "copy writes, no write into memory a pending copy reads or writes, no access on one stream unordered with a "
          "pending one on another, no wait on an event never recorded, no stream waiting on itself",
          requires={RELAY, RELAY_STREAMS}, cases=stream_relay_cases)  # no pinned example: a failing one would be reported unshrunk
def relay_under_explored_schedules(engine, case):
    reads = run_on_model(case.schedule, lambda m: engine.run_confidence_relay_on(case.relay, m))
    expect_own_lagged_reads(case.relay, reads, engine.confidence_relay_lag)
