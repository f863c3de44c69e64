"""Stream-ordering bugs in the relay's CUDA-style path: each one an ordering the CPU's happy order hides, caught by
STREAM-001 only under a schedule that leaves a ring copy pending (contracts.streams)."""

from dspark.overlap_utils import FutureMap

from . import Mutant


def _read_before_the_wait(self, rows):
    """The budget reads its ring slot without waiting for the copy into it (the slot's event)."""
    rows = self._rows("rows", rows)
    lag = self.confidence_ring.lag
    issued = self.confidence_ring.issued
    if issued < lag:
        return None
    self.streams.host_read(self.streams.mem(f"confidence_ring.slot{(issued - lag) % (lag + 1)}", rows),
                           "the budget's relayed confidence")
    held = self.confidence_ring._pushes - len(self.confidence_ring._history)
    if not 0 <= issued - lag - held < len(self.confidence_ring._history):
        return None  # what an unsynchronized read of a slot still being written finds: nothing usable (verify-all)
    return self.confidence_ring.read(rows, push=issued - lag)


def _recorded_on_the_forward_stream(self, slot, copy):
    """The copy-done events recorded on the current (forward) stream, not the copy stream: they mark nothing."""
    self._ring_ready.record()
    self._slot_ready[slot].record()


MUTANTS = [
    Mutant("relay-reads-ring-before-the-event-wait", ("STREAM-001",),
           lambda mp: mp.setattr(FutureMap, "resolve_confidence", _read_before_the_wait)),
    Mutant("relay-scatter-races-the-pending-ring-copy", ("STREAM-001",),
           lambda mp: mp.setattr(FutureMap, "_await_ring_copy", lambda self: None)),
    Mutant("relay-copy-event-recorded-on-the-wrong-stream", ("STREAM-001",),
           lambda mp: mp.setattr(FutureMap, "_mark_copied", _recorded_on_the_forward_stream)),
    Mutant("relay-freed-row-reused-while-its-ring-copy-is-pending", ("STREAM-001",),
           lambda mp: mp.setattr(FutureMap, "_hold_rows", lambda self, pool_rows, copy: None)),
]
