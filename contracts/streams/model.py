"""A deterministic model of device streams, events and asynchronous copies, and a race detector over it.

An engine written against a torch-like stream surface (`Stream`, `Event`, `current_stream`, `stream(s)`,
`wait_stream`, `wait_event`, `record`, `query`, `synchronize`, `record_stream`, `copy_(non_blocking=...)`) is handed
a `StreamModel` instead of the device. Enqueued work (a kernel's or a copy's effect, a callable) runs only when the
model completes it, and it completes it only between host actions, as the `Schedule` says. So an order a GPU may
run, and a CPU run never does, is one schedule away.

The engine declares what each op and each host access touches as `Mem` regions (a buffer's name and rows). The
model flags, as compute-sanitizer's racecheck and synccheck do for CUDA:

- a host read of memory a pending op still writes;
- a host write (a reuse included) into memory a pending op still reads or writes;
- an op enqueued against a pending op on another stream it is not ordered after (through events or
  `wait_stream`), one of them writing memory the other touches;
- a wait on an event that was never recorded; a stream waiting on itself.

Each violation names the two operations, the host action and the schedule. A schedule under which the host polls
without progress past `max_polls` is reported as a deadlock (`StreamDeadlock`, raised to unwind the engine). Any
other attribute of the surface raises `UnsupportedStreamOp`, one line naming it: nothing completes silently.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, FrozenSet, Optional

from contracts.streams.schedule import EAGER, Schedule


class UnsupportedStreamOp(NotImplementedError):
    """A stream operation the model does not support (never completed silently)."""


class StreamDeadlock(RuntimeError):
    """The host waits on work the schedule never lets complete (bounded: `max_polls`)."""


@dataclass(frozen=True)
class Mem:
    """A region: a buffer's name and its rows (None: the whole buffer)."""

    name: str
    rows: Optional[FrozenSet[int]] = None

    def overlaps(self, other: "Mem") -> bool:
        if self.name != other.name:
            return False
        return self.rows is None or other.rows is None or bool(self.rows & other.rows)

    def __str__(self) -> str:
        return self.name if self.rows is None else f"{self.name}[{','.join(map(str, sorted(self.rows)))}]"


@dataclass(frozen=True)
class StreamViolation:
    kind: str  # host-read-pending-write, host-write-pending-access, unordered-access, unrecorded-event, self-wait, deadlock
    action: int  # the host action (0-based) at which it was seen
    first: str  # the earlier operation
    second: str  # the later operation (or host action)
    schedule: str

    def __str__(self) -> str:
        return f"{self.kind} at host action {self.action}: {self.second} vs {self.first} (schedule: {self.schedule})"


class _Strict:
    """Unknown attributes are unsupported operations, named in one line."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise UnsupportedStreamOp(f"stream model: {type(self).__name__}.{name} is not a supported stream operation")


@dataclass(eq=False)
class _Op:
    seq: int
    kind: str  # kernel, copy, record, wait
    what: str
    stream: "Stream"
    reads: tuple = ()
    writes: tuple = ()
    fn: Optional[Callable] = None
    waits_for: Optional["_Op"] = None  # a wait: the record op it waits for
    clock: dict = field(default_factory=dict)  # stream id -> seq of the newest op on it ordered before this one
    done: bool = False

    def __str__(self) -> str:
        return f"op #{self.seq} {self.kind} '{self.what}' on stream '{self.stream.name}'"


class Stream(_Strict):
    def __init__(self, model: "StreamModel", name: str):
        self.model, self.name, self.id = model, name, len(model._streams)
        self.queue: list = []  # pending ops, oldest first
        self.clock: dict = {}  # what the next op on this stream is ordered after

    def wait_event(self, event: "Event") -> None:
        self.model._host(f"stream '{self.name}'.wait_event({event.name})")
        self.model._wait(self, event)

    def wait_stream(self, other: "Stream") -> None:
        m = self.model
        m._host(f"stream '{self.name}'.wait_stream('{other.name}')")
        if other is self:
            m._violate("self-wait", f"stream '{self.name}'", f"stream '{self.name}'.wait_stream itself")
            return
        ev = m.Event(name=f"wait_stream({other.name})")
        m._record(ev, other)
        m._wait(self, ev)

    def query(self) -> bool:
        self.model._host(f"stream '{self.name}'.query()")
        return self.model._poll(not self.queue)

    def synchronize(self) -> None:
        self.model._host(f"stream '{self.name}'.synchronize()")
        if self.queue:
            self.model._force(self.queue[-1])

    def record_event(self, event: Optional["Event"] = None) -> "Event":
        event = event or self.model.Event()
        event.record(self)
        return event

    def __repr__(self) -> str:
        return f"<modelled stream '{self.name}'>"


class Event(_Strict):
    def __init__(self, model: "StreamModel", name: str):
        self.model, self.name = model, name
        self.op: Optional[_Op] = None  # the newest record

    def record(self, stream: Optional[Stream] = None) -> None:
        stream = stream or self.model._current
        self.model._host(f"event {self.name}.record('{stream.name}')")
        self.model._record(self, stream)

    def wait(self, stream: Optional[Stream] = None) -> None:
        (stream or self.model._current).wait_event(self)

    def query(self) -> bool:
        self.model._host(f"event {self.name}.query()")
        return self.model._poll(self.op is None or self.op.done)

    def synchronize(self) -> None:
        m = self.model
        m._host(f"event {self.name}.synchronize()")
        if self.op is None:
            m._violate("unrecorded-event", f"event {self.name} (never recorded)", f"host synchronize on {self.name}")
            return
        m._force(self.op)

    def __repr__(self) -> str:
        return f"<modelled event {self.name}>"


class StreamModel(_Strict):
    """The stream surface an engine is handed, with the schedule that decides what completes when."""

    def __init__(self, schedule: Schedule = EAGER, *, max_polls: int = 1000):
        self.schedule = schedule
        self.max_polls = max_polls
        self.violations: list = []
        self.actions: list = []  # what each host action was, in order
        self._streams: list = []
        self._seq = 0
        self._events = 0
        self._idle_polls = 0
        self._in_use: dict = {}  # Mem -> record ops of the streams that use it (record_stream)
        self._freed: dict = {}  # Mem -> the record ops a reuse waits for
        self.default_stream = Stream(self, "default")
        self._streams.append(self.default_stream)
        self._current = self.default_stream

    # ---- the torch-like surface -------------------------------------------

    def Stream(self, name: Optional[str] = None, **kwargs) -> Stream:  # noqa: N802 (torch's spelling)
        if kwargs:
            raise UnsupportedStreamOp(f"stream model: Stream({', '.join(kwargs)}=...) is not a supported stream option")
        s = Stream(self, name or f"stream{len(self._streams)}")
        self._streams.append(s)
        return s

    def Event(self, name: Optional[str] = None, **kwargs) -> Event:  # noqa: N802
        if any(kwargs.values()):  # enable_timing, blocking, interprocess
            raise UnsupportedStreamOp(f"stream model: Event({', '.join(k for k, v in kwargs.items() if v)}=True) "
                                      "is not a supported event option")
        self._events += 1
        return Event(self, name or f"e{self._events}")

    def current_stream(self) -> Stream:
        return self._current

    @contextmanager
    def stream(self, s: Stream):
        """`with streams.stream(s):` enqueue on `s` (torch.cuda.stream)."""
        before, self._current = self._current, s
        try:
            yield s
        finally:
            self._current = before

    def synchronize(self) -> None:
        self._host("device synchronize()")
        for s in self._streams:
            if s.queue:
                self._force(s.queue[-1])

    @staticmethod
    def mem(name: str, rows=None) -> Mem:
        return Mem(name, None if rows is None else frozenset(int(r) for r in rows))

    def launch(self, what: str, fn: Optional[Callable] = None, *, reads=(), writes=()) -> None:
        """A kernel on the current stream: `fn` runs when the schedule completes it."""
        self._host(f"launch '{what}'")
        self._enqueue("kernel", what, self._current, tuple(reads), tuple(writes), fn)

    def copy_(self, what: str, dst: Mem, src: Mem, fn: Optional[Callable] = None, *, non_blocking: bool = False) -> None:
        """`dst.copy_(src, non_blocking=...)` on the current stream; a blocking copy returns once it is done."""
        self._host(f"copy '{what}'")
        op = self._enqueue("copy", what, self._current, (src,), (dst,), fn)
        if not non_blocking:
            self._force(op)

    def record_stream(self, mem: Mem, stream: Stream) -> None:
        """`tensor.record_stream(stream)`: a free of `mem` defers its reuse until the work `stream` has now is done."""
        self._host(f"record_stream({mem}, '{stream.name}')")
        ev = self.Event(name=f"in-use({mem})")
        self._record(ev, stream)
        self._in_use.setdefault(mem, []).append(ev.op)

    def free(self, mem: Mem) -> None:
        """The caching allocator's free: the region may be handed out again once its recorded uses complete."""
        self._host(f"free({mem})")
        for held, ops in list(self._in_use.items()):
            if held.overlaps(mem):
                self._freed.setdefault(mem, []).extend(ops)
                del self._in_use[held]

    def reuse(self, mem: Mem, what: str) -> None:
        """The region handed out again and written on the host (an allocator's reset, a generation bump)."""
        for freed, ops in list(self._freed.items()):
            if freed.overlaps(mem):
                for op in ops:
                    self._force(op)
                del self._freed[freed]
        self.host_write(mem, what)

    def host_read(self, mem: Mem, what: str) -> None:
        self._host(f"host read {mem} ({what})")
        for op in self._pending():
            if any(w.overlaps(mem) for w in op.writes):
                self._violate("host-read-pending-write", str(op), f"host read of {mem} ({what})")

    def host_write(self, mem: Mem, what: str) -> None:
        self._host(f"host write {mem} ({what})")
        for op in self._pending():
            if any(a.overlaps(mem) for a in op.reads + op.writes):
                self._violate("host-write-pending-access", str(op), f"host write of {mem} ({what})")

    # ---- reports ------------------------------------------------------------

    def describe_schedule(self) -> str:
        return f"{self.schedule!r} = {self.schedule.describe([s.name for s in self._streams])}"

    def pending(self) -> list:
        return [str(op) for op in self._pending()]

    # ---- the machinery ------------------------------------------------------

    def _pending(self) -> list:
        return [op for s in self._streams for op in s.queue]

    def _violate(self, kind: str, first: str, second: str) -> None:
        self.violations.append(StreamViolation(kind, len(self.actions) - 1, first, second, self.describe_schedule()))

    def _host(self, what: str) -> None:
        """A host action: first, every stream the schedule does not stall drains as far as its waits allow."""
        stalled = self.schedule.stalled(len(self.actions))
        self.actions.append(what)
        progress = True
        while progress:
            progress = False
            for s in self._streams:
                while s.queue and s.id not in stalled and self._ready(s.queue[0]):
                    self._complete(s.queue[0])
                    progress = True

    @staticmethod
    def _ready(op: _Op) -> bool:
        return op.waits_for is None or op.waits_for.done

    def _complete(self, op: _Op) -> None:
        assert op.stream.queue[0] is op, "ops complete in stream order"
        op.stream.queue.pop(0)
        op.done = True
        self._idle_polls = 0
        if op.fn is not None:
            op.fn()

    def _force(self, op: _Op) -> None:
        """Complete `op` and what it depends on (a host wait): the schedule delays work, never a synchronize."""
        while not op.done:
            head = op.stream.queue[0]
            if head.waits_for is not None and not head.waits_for.done:
                self._force(head.waits_for)  # ordered before it when the wait was enqueued: no cycle
            self._complete(head)

    def _poll(self, done: bool) -> bool:
        if done:
            self._idle_polls = 0
            return True
        self._idle_polls += 1
        if self._idle_polls > self.max_polls:
            self._violate("deadlock", "; ".join(self.pending()) or "nothing pending",
                          f"{self.max_polls} host polls without progress ({self.actions[-1]})")
            raise StreamDeadlock(str(self.violations[-1]))
        return False

    def _enqueue(self, kind, what, stream, reads, writes, fn, waits_for=None) -> _Op:
        self._seq += 1
        op = _Op(self._seq, kind, what, stream, reads, writes, fn, waits_for, dict(stream.clock))
        op.clock[stream.id] = op.seq
        for other in self._pending():
            if other.stream is not stream and other.clock.get(other.stream.id, 0) > op.clock.get(other.stream.id, 0) \
                    and self._conflict(other, op):
                self._violate("unordered-access", str(other), f"{op} (not ordered after it)")
        stream.clock = dict(op.clock)
        stream.queue.append(op)
        return op

    @staticmethod
    def _conflict(a: _Op, b: _Op) -> bool:
        return any(w.overlaps(m) for w in a.writes for m in b.reads + b.writes) or \
            any(w.overlaps(m) for w in b.writes for m in a.reads)

    def _record(self, event: Event, stream: Stream) -> None:
        event.op = self._enqueue("record", f"record {event.name}", stream, (), (), None)

    def _wait(self, stream: Stream, event: Event) -> None:
        if event.op is None:
            self._violate("unrecorded-event", f"event {event.name} (never recorded)",
                          f"stream '{stream.name}'.wait_event({event.name})")
            return  # CUDA: a wait on a never-recorded event waits for nothing
        if event.op.stream is stream:
            return  # already in stream order
        op = self._enqueue("wait", f"wait {event.name}", stream, (), (), None, waits_for=event.op)
        for sid, seq in event.op.clock.items():  # what the record was ordered after, this stream now is too
            stream.clock[sid] = max(stream.clock.get(sid, 0), seq)
        op.clock = dict(stream.clock)
