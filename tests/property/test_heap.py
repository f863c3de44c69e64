"""`contracts.heap.settle`: what survives is frozen out of later passes, and garbage is collected, not frozen."""

import gc
import weakref

from contracts import heap


class _Node:
    pass


def test_settle_freezes_what_lives_and_collects_what_does_not():
    kept, dropped = _Node(), _Node()
    kept.self = kept
    dropped.self = dropped  # a cycle: only the collector frees it
    gone = weakref.ref(dropped)
    del dropped
    before = gc.get_freeze_count()
    heap.settle()
    assert gone() is None, "garbage was frozen instead of collected"
    assert gc.get_freeze_count() > before
    assert all(o is not kept for o in gc.get_objects(generation=2))  # frozen: in no generation
