"""STREAM-001 on the reference: its relay clean under every schedule of a bounded space, and the contract's
reports of what the stream model refuses (an unsupported operation, a starving schedule) as one-line violations."""

from __future__ import annotations

import pytest

from contracts.adapters.reference import ReferenceAdapter
from contracts.boundary.streams import StreamRelayCase
from contracts.catalog.relay import expect_own_lagged_reads
from contracts.registry import all_contracts
from contracts.strategies.relay import REUSE_CASE
from contracts.streams import EAGER, Schedule, Stall, StreamModel

CONTRACT = all_contracts()["STREAM-001"]


def test_the_reference_relay_is_clean_and_right_under_every_single_stall():
    engine = ReferenceAdapter()
    actions = len(_run(engine, EAGER).actions)
    for start in range(actions):
        for length in (1, 3, 12, actions):
            for streams, default in ((1, False), (0, True), (1, True)):
                schedule = Schedule((Stall(start, length, streams, default),))
                m = _run(engine, schedule)
                assert m.violations == [], (schedule, m.violations[0])


def _run(engine, schedule) -> StreamModel:
    m = StreamModel(schedule)
    expect_own_lagged_reads(REUSE_CASE, engine.run_confidence_relay_on(REUSE_CASE, m), engine.confidence_relay_lag)
    return m


class _Asks(ReferenceAdapter):
    """The reference relay, but it first does one thing to the stream surface."""

    def __init__(self, act):
        super().__init__()
        self._act = act

    def run_confidence_relay_on(self, case, streams):
        self._act(streams)
        return super().run_confidence_relay_on(case, streams)


def _starve(m):
    side = m.Stream("side")
    with m.stream(side):
        m.launch("work")
    done = m.Event("done")
    done.record(side)
    while not done.query():  # a host spin on an event: under a long enough stall it never completes
        pass


@pytest.mark.parametrize("act, what, words", [
    (lambda m: m.Stream(priority=-1), "stream operation", "Stream(priority=...) is not a supported stream option"),
    (_starve, "stream schedule", "deadlock"),
])
def test_what_the_model_refuses_is_a_violation_of_one_line(act, what, words):
    case = StreamRelayCase(REUSE_CASE, Schedule((Stall(0, 10**6, 1),)))
    with pytest.raises(Exception) as e:
        CONTRACT.check(_Asks(act), case)
    assert type(e.value).__name__ == "Mismatch" and e.value.what == what and words in str(e.value.observed)
    assert "\n" not in str(e.value.observed)
    if what == "stream schedule":  # the schedule that starved the host is named
        assert "Stall(start=0" in str(e.value.observed)

