"""The stream model itself: each violation kind found, a correct program clean under every schedule of a small
bounded space, a failing schedule shrunk to the smallest interleaving, bad input refused in one line."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import find, settings

from contracts.strategies.schedules import schedules
from contracts.streams import EAGER, Schedule, Stall, StreamDeadlock, StreamModel, UnsupportedStreamOp

COPY = 0b1  # the bit of the first stream a program creates


def ring_program(m: StreamModel, steps: int = 3, bug: str = "") -> list:
    """A producer on the default stream stages a value per step, a copy stream copies it into a host ring, the host
    reads the ring once all steps are issued: the relay's shape. `bug` drops one ordering."""
    copy = m.Stream("copy")
    staging, ring = [None], [None] * steps
    copied = m.Event("copied")
    for step in range(steps):
        if step and bug != "scatter-races-copy":
            m.current_stream().wait_event(copied)  # the staging is not overwritten while the last copy reads it
        m.launch("scatter", lambda v=step: staging.__setitem__(0, v), writes=(m.mem("staging"),))
        staged = m.Event("staged")
        staged.record()
        copy.wait_event(staged)
        with m.stream(copy):
            m.copy_("ring copy", m.mem("ring", [step]), m.mem("staging"),
                    lambda s=step: ring.__setitem__(s, staging[0]), non_blocking=True)
        copied.record(m.current_stream() if bug == "wrong-stream" else copy)
    if bug != "read-before-wait":
        copied.synchronize()
    out = []
    for step in range(steps):
        m.host_read(m.mem("ring", [step]), "read the ring")
        out.append(ring[step])
    return out


def kinds(m) -> set:
    return {v.kind for v in m.violations}


def test_a_correct_program_is_clean_and_right_under_every_small_schedule():
    one = [Stall(start, length, mask, default) for start in range(12) for length in (1, 2, 5)
           for mask, default in ((1, False), (0, True), (1, True))]
    space = [EAGER] + [Schedule((s,)) for s in one] + [Schedule(p) for p in itertools.combinations(one[::7], 2)]
    for schedule in space:
        m = StreamModel(schedule)
        assert ring_program(m) == [0, 1, 2], schedule
        assert m.violations == [], (schedule, m.violations)


@pytest.mark.parametrize("bug, kind", [
    ("read-before-wait", "host-read-pending-write"),
    ("wrong-stream", "host-read-pending-write"),
    ("scatter-races-copy", "unordered-access"),
])
def test_each_ordering_bug_is_found_under_some_schedule_and_only_then(bug, kind):
    m = StreamModel(EAGER)
    assert ring_program(m, bug=bug) == [0, 1, 2] and m.violations == []  # the CPU's happy order hides it
    m = StreamModel(Schedule((Stall(0, 10**6, COPY),)))  # the copy stream held back as long as the host allows
    ring_program(m, bug=bug)
    assert kind in kinds(m), m.violations
    v = next(v for v in m.violations if v.kind == kind)
    assert "ring copy" in v.first + v.second and "Stall(" in v.schedule


def test_the_pending_write_is_what_the_host_reads():
    """Under the stall the read sees the ring as it was: the model runs an op's effect only when it completes."""
    m = StreamModel(Schedule((Stall(0, 10**6, COPY),)))
    assert ring_program(m, bug="read-before-wait") == [None, None, None]


def test_a_write_into_memory_a_pending_copy_reads():
    m = StreamModel(Schedule((Stall(0, 10**6, COPY),)))
    copy = m.Stream("copy")
    with m.stream(copy):
        m.copy_("to host", m.mem("pinned", [0]), m.mem("rows", [3]), non_blocking=True)
    m.host_write(m.mem("rows", [3]), "reuse row 3")
    m.host_write(m.mem("rows", [4]), "row 4 is not read")
    assert [(v.kind, v.action) for v in m.violations] == [("host-write-pending-access", 1)]
    assert "host write of rows[3] (reuse row 3)" in str(m.violations[0])


def test_a_free_defers_reuse_until_the_recorded_stream_is_done():
    for record in (True, False):
        m = StreamModel(Schedule((Stall(0, 10**6, COPY),)))
        copy = m.Stream("copy")
        with m.stream(copy):
            m.copy_("ring copy", m.mem("ring"), m.mem("gen", [1]), non_blocking=True)
        if record:
            m.record_stream(m.mem("gen", [1]), copy)
        m.free(m.mem("gen", [1]))
        m.reuse(m.mem("gen", [1]), "take row 1")
        assert (m.violations == []) == record, m.violations


def test_an_unrecorded_event_and_a_stream_waiting_on_itself():
    m = StreamModel()
    s = m.Stream("side")
    s.wait_event(m.Event("never"))
    s.wait_stream(s)
    m.Event("never2").synchronize()
    assert [v.kind for v in m.violations] == ["unrecorded-event", "self-wait", "unrecorded-event"]
    assert "never" in str(m.violations[0]) and "'side'" in str(m.violations[1])


def test_a_starving_schedule_is_a_deadlock_with_its_schedule_not_a_hang():
    m = StreamModel(Schedule((Stall(0, 10**9, COPY),)), max_polls=50)
    copy = m.Stream("copy")
    with m.stream(copy):
        m.launch("work")
    ev = m.Event("done")
    ev.record(copy)
    with pytest.raises(StreamDeadlock, match=r"deadlock .*50 host polls .*Stall\(start=0"):
        while not ev.query():
            pass
    assert m.violations[-1].kind == "deadlock" and "'work'" in m.violations[-1].first


def test_a_synchronize_waits_through_a_stall():
    m = StreamModel(Schedule((Stall(0, 10**9, COPY, default=True),)))
    done = []
    m.launch("k", lambda: done.append(1), writes=(m.mem("x"),))
    m.current_stream().synchronize()
    m.host_read(m.mem("x"), "after sync")
    assert done == [1] and m.violations == []


@pytest.mark.parametrize("call, name", [
    (lambda m: m.Stream(priority=-1), "Stream(priority=...)"),
    (lambda m: m.Event(enable_timing=True), "Event(enable_timing=True)"),
    (lambda m: m.Event().elapsed_time(None), "Event.elapsed_time"),
    (lambda m: m.Stream().cuda_stream, "Stream.cuda_stream"),
    (lambda m: m.graph_pool_handle(), "StreamModel.graph_pool_handle"),
])
def test_an_unsupported_operation_is_one_line_naming_it(call, name):
    with pytest.raises(UnsupportedStreamOp) as e:
        call(StreamModel())
    assert name in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("bug", ["read-before-wait", "wrong-stream", "scatter-races-copy"])
def test_shrinking_reaches_a_minimal_interleaving(bug):
    """The shrunk schedule is one stall, and 1-minimal: a stall one host action shorter at either end, or over
    fewer streams, no longer fails (the delta-debugging sense of minimal; Hypothesis shrinks towards it)."""
    def fails(schedule) -> bool:
        m = StreamModel(schedule)
        ring_program(m, bug=bug)
        return bool(m.violations)

    got = find(schedules(max_actions=32), fails, settings=settings(database=None, derandomize=True, max_examples=500))
    assert len(got.stalls) == 1, got
    (s,) = got.stalls
    smaller = [Stall(s.start + 1, s.length - 1, s.streams, s.default), Stall(s.start, s.length - 1, s.streams, s.default)]
    smaller += [Stall(s.start, s.length, s.streams & ~(1 << k), s.default) for k in range(3) if s.streams >> k & 1]
    smaller += [Stall(s.start, s.length, s.streams, False)] if s.default and s.streams else []
    for shorter in smaller:
        assert not fails(Schedule((shorter,)) if shorter.length else EAGER), (got, shorter)
