"""Scoped replacement of one engine attribute, for the few places an adapter must stand in for or record an engine
function (each listed in its adapter's docstring)."""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Iterator

_MISSING = object()


@contextlib.contextmanager
def patched(owner, attr: str, value: Any) -> Iterator[Any]:
    """`owner.attr = value` within the block (owner: a module, a module's dotted name, or a class), restored after;
    yields the original. An attribute the engine no longer has is an error: the adapter is out of date."""
    target = importlib.import_module(owner) if isinstance(owner, str) else owner
    old = getattr(target, attr, _MISSING)
    if old is _MISSING:
        name = owner if isinstance(owner, str) else getattr(owner, "__qualname__", getattr(owner, "__name__", owner))
        raise AttributeError(f"{name}.{attr} does not exist in this engine version; the adapter is out of date")
    setattr(target, attr, value)
    try:
        yield old
    finally:
        setattr(target, attr, old)
