"""What a session keeps for good, kept out of the garbage collector's full passes.

SGLang's imports leave about 680,000 tracked objects, and every full collection walked them (0.38 s): the automatic
ones, and the `gc.collect()` an SGLang engine makes each time it is constructed (`_profile_available_bytes`). SGLang
itself calls `gc.freeze()` after start-up (`freeze_gc`); the harness does the same at the points where what exists
will live for the rest of the session: the engine loaded, the tests collected, an engine built for a cache.

Frozen objects are never collected, not even by the interpreter's last collections at exit. Extension modules that
count their live objects at exit (Triton's nanobind bindings) then report every frozen one as leaked, about 30 lines
of noise after a run; so they are unfrozen at exit, before those last collections, and freed as usual.
"""

from __future__ import annotations

import atexit
import gc

_unfreeze_registered = False


def settle() -> None:
    """Collect, then freeze whatever survives: later passes skip it. Collected first, so no garbage is frozen
    (what is frozen and later dropped is never collected: call this only where what exists is meant to stay)."""
    global _unfreeze_registered
    gc.collect()
    gc.freeze()
    if not _unfreeze_registered:
        atexit.register(gc.unfreeze)
        _unfreeze_registered = True
