"""Schedules for the stream model: a few stalls, each holding some streams back over a run of host actions.

Hypothesis shrinks a failing schedule to fewer stalls, earlier, shorter, over fewer streams: the smallest deviation
from the eager order (everything done before the host looks again) that still fails. Bounding the number of stalls
is CHESS's preemption bound: most ordering bugs need one or two.
"""

from __future__ import annotations

from hypothesis import strategies as st

from contracts.boundary.relay import RelayCase
from contracts.boundary.streams import StreamRelayCase
from contracts.strategies.relay import relay_cases
from contracts.streams.schedule import Schedule, Stall


@st.composite
def stalls(draw, max_actions: int = 64, max_streams: int = 3) -> Stall:
    # Drawn length first: the shrinker minimises earlier draws first, so a failing stall shrinks to the shortest delay
    # (then the earliest, then the fewest streams), not to one that starts at 0 and runs long.
    length = draw(st.integers(1, max_actions), label="length")
    start = draw(st.integers(0, max_actions - 1), label="start")
    streams = draw(st.integers(0, 2 ** max_streams - 1), label="streams")
    return Stall(start, length, streams, draw(st.booleans(), label="default") if streams else True)


def schedules(max_actions: int = 64, max_streams: int = 3, max_stalls: int = 2):
    """Schedules of at most `max_stalls` stalls over host actions [0, max_actions), the
    default stream and the first `max_streams` streams a program creates."""
    return st.lists(stalls(max_actions, max_streams), max_size=max_stalls).map(lambda s: Schedule(tuple(s)))


# Host actions a stall may cover: about a dozen per relay step, so the first four steps, where a short case
# shows every ordering bug (a longer span thins the stalls that hit one: fewer found at the check's budget).
RELAY_ACTIONS = 48


@st.composite
def stream_relay_cases(draw):
    """A relay case with overlap on (the relay's own streams), and a schedule over its host actions."""
    case = draw(relay_cases(), label="relay")
    case = RelayCase(case.pool_size, case.gamma, True, case.steps)
    return StreamRelayCase(case, draw(schedules(RELAY_ACTIONS, max_streams=1), label="schedule"))
