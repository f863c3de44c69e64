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
    "vllm": "contracts.adapters.vllm:VLLMAdapter",
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
    """The adapter `spec` names, checked (contracts.validation) before any contract sees it."""
    from contracts.validation import validate_adapter

    target = _target(spec)
    where = f"engine {spec!r}" + ("" if target == spec else f" ({target})")
    module_name, _, attr = target.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
        engine = factory()
    except EngineLoadError:
        raise
    except Exception as e:
        lines = str(e).splitlines() or [""]  # one line: a message's further lines are joined onto it
        raise EngineLoadError(f"{where} could not be loaded: {type(e).__name__}: {' | '.join(lines)}") from e
    try:
        validate_adapter(engine)
    except (TypeError, ValueError) as e:
        raise EngineLoadError(f"{where} is not a valid adapter: {e}") from None
    engine.engine_spec = spec
    return engine


def engine_spec(engine) -> str:
    """How the engine was loaded (an entry point name or module:factory); its `name` for an adapter built directly."""
    return getattr(engine, "engine_spec", engine.name)


def engine_label(engine) -> str:
    """The one name reports use: the adapter's `name`, plus the spec it was loaded by where that differs."""
    spec = engine_spec(engine)
    return engine.name if spec == engine.name else f"{engine.name} ({spec})"
