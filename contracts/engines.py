"""Resolve the engine under test: `--engine`, else $DSPARK_ENGINE, else `reference`.

A name is an entry point in the `dspark_contracts.engines` group (or one of the
built-in names) or a `package.module:factory` path. Loading is lazy, so
collection works without the engine installed; a name that cannot be loaded
fails with one line and never falls back to another engine.
"""

from __future__ import annotations

import importlib
import os
from importlib.metadata import entry_points

GROUP = "dspark_contracts.engines"
DEFAULT = "reference"
BUILTIN = {
    "reference": "contracts.adapters.reference:ReferenceAdapter",
    "sglang": "contracts.adapters.sglang:SGLangAdapter",
}


class EngineLoadError(RuntimeError):
    pass


def chosen_engine(option: str | None = None) -> str:
    return option or os.environ.get("DSPARK_ENGINE") or DEFAULT


def _target(spec: str) -> str:
    if ":" in spec:
        return spec
    for ep in entry_points(group=GROUP):
        if ep.name == spec:
            return ep.value
    if spec in BUILTIN:
        return BUILTIN[spec]
    known = sorted({ep.name for ep in entry_points(group=GROUP)} | set(BUILTIN))
    raise EngineLoadError(f"unknown engine {spec!r}: use one of {known} or a 'package.module:factory' path")


def load_engine(spec: str):
    target = _target(spec)
    module_name, _, attr = target.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
        engine = factory()
    except EngineLoadError:
        raise
    except Exception as e:
        raise EngineLoadError(f"engine {spec!r} ({target}) could not be loaded: {e}") from e
    for field in ("name", "version", "device", "capabilities"):
        if not hasattr(engine, field):
            raise EngineLoadError(f"engine {spec!r} ({target}) is not an adapter: it has no {field!r}")
    engine.engine_spec = spec
    return engine
