"""The stream surface the overlap path runs on, and its default: work that completes the moment it is enqueued.

The overlap relay is written against a torch-like stream surface (Stream, Event, current_stream, stream(s),
wait_event, record, synchronize, record_stream, copy_(non_blocking=...)), plus `mem` / `launch` / `host_read` /
`host_write` / `free` / `reuse`, which say what each op and host access touches. On the CPU this default runs every
op at once and declares nothing, so the engine behaves (and costs) as a plain sequential program. A harness may
hand the engine another surface with the same methods (a stream model that delays work and checks for races).
"""

from __future__ import annotations

from contextlib import contextmanager


class _Stream:
    def wait_event(self, event) -> None:
        pass

    def wait_stream(self, other) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class _Event:
    def record(self, stream=None) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class Immediate:
    """Every op runs when enqueued; every wait and declaration is a no-op."""

    _stream = _Stream()

    def Stream(self, name=None):  # noqa: N802 (torch's spelling)
        return self._stream

    def Event(self, name=None):  # noqa: N802
        return _Event()

    def current_stream(self):
        return self._stream

    @contextmanager
    def stream(self, s):
        yield s

    def synchronize(self) -> None:
        pass

    @staticmethod
    def mem(name, rows=None):
        return None

    def launch(self, what, fn=None, *, reads=(), writes=()) -> None:
        if fn is not None:
            fn()

    def copy_(self, what, dst, src, fn=None, *, non_blocking=False) -> None:
        if fn is not None:
            fn()

    def record_stream(self, mem, stream) -> None:
        pass

    def free(self, mem) -> None:
        pass

    def reuse(self, mem, what) -> None:
        pass

    def host_read(self, mem, what) -> None:
        pass

    def host_write(self, mem, what) -> None:
        pass


IMMEDIATE = Immediate()
