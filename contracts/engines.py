"""Resolve the engine under test: `--engine`, else $DSPARK_ENGINE, else `reference`.

A name is an entry point in the `dspark_contracts.engines` group (every engine pack,
the built-in ones included, declares one) or a `package.module:factory` path, which
is imported as `python -m` would: from the current directory first. Loading is lazy,
so collection works without the engine installed; a name that cannot be loaded fails
with one line and never falls back to another engine.

Version policy: a pack declares `tested_versions`. An engine at another version still
runs, and says so (`version_line`); `--strict-version` refuses it (`check_version`).
"""

from __future__ import annotations

import importlib
import os
import sys
from contextlib import contextmanager
from importlib.metadata import entry_points
from typing import NamedTuple

GROUP = "dspark_contracts.engines"
DEFAULT = "reference"


class EngineLoadError(RuntimeError):
    pass


def chosen_engine(option: str | None = None) -> str:
    return option or os.environ.get("DSPARK_ENGINE") or DEFAULT


def engine_names() -> list:
    """Every engine the installed packs declare, sorted."""
    return sorted({ep.name for ep in entry_points(group=GROUP)})


def _target(spec: str) -> str:
    if ":" in spec:
        return spec
    for ep in entry_points(group=GROUP):
        if ep.name == spec:
            return ep.value
    raise EngineLoadError(f"unknown engine {spec!r}: use one of {engine_names()} or a 'package.module:factory' path")


@contextmanager
def from_cwd():
    """The current directory first on sys.path while a `module:factory` is imported and its factory called, as
    `python -m` puts it: a user's own adapter module next to them is found without PYTHONPATH, and so is the engine
    module its `__init__` imports from that folder (as the adapter guide advises). `check` holds it for the whole
    run, since a method may import lazily too."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _import(target: str):
    module_name, _, attr = target.partition(":")
    with from_cwd():
        module = importlib.import_module(module_name)
    return getattr(module, attr)


def pack_class(spec: str):
    """The factory `spec` names (an adapter class, for the packs), imported but not called: the engine itself is
    not loaded, so a pack's declarations (capabilities, tested versions, known failures) can be read without it."""
    target = _target(spec)
    try:
        return _import(target)
    except Exception as e:
        raise EngineLoadError(f"engine {spec!r} ({target}) could not be imported: {_one_line(e)}") from e


def _one_line(e: BaseException) -> str:
    lines = str(e).splitlines() or [""]  # one line: a message's further lines are joined onto it
    return f"{type(e).__name__}: {' | '.join(lines)}"


def load_engine(spec: str, *, strict_version: bool = False):
    """The adapter `spec` names, checked (contracts.validation) before any contract sees it; with `strict_version`,
    an engine version its pack was not tested with is refused."""
    from contracts.validation import validate_adapter

    target = _target(spec)
    where = f"engine {spec!r}" + ("" if target == spec else f" ({target})")
    try:
        with from_cwd():  # the factory may import the engine from the same folder
            engine = _import(target)()
    except EngineLoadError:
        raise
    except Exception as e:
        raise EngineLoadError(f"{where} could not be loaded: {_one_line(e)}") from e
    try:
        validate_adapter(engine)
    except (TypeError, ValueError) as e:
        raise EngineLoadError(f"{where} is not a valid adapter: {e}") from None
    engine.engine_spec = spec
    if strict_version:
        check_version(engine)
    return engine


def engine_spec(engine) -> str:
    """How the engine was loaded (an entry point name or module:factory); its `name` for an adapter built directly."""
    return getattr(engine, "engine_spec", engine.name)


def engine_label(engine) -> str:
    """The one name reports use: the adapter's `name`, plus the spec it was loaded by where that differs."""
    spec = engine_spec(engine)
    return engine.name if spec == engine.name else f"{engine.name} ({spec})"


class VersionStatus(NamedTuple):
    name: str
    version: str
    tested_versions: tuple

    @property
    def tested(self) -> bool:
        """Untested when the pack names no tested version at all, too: nothing vouches for it."""
        return self.version in self.tested_versions

    @property
    def line(self) -> str:
        """`engine sglang 0.5.23`, or `engine sglang 0.5.24 (untested; tested: 0.5.23)`."""
        if self.tested:
            return f"engine {self.name} {self.version}"
        tested = ", ".join(self.tested_versions) or "none declared"
        return f"engine {self.name} {self.version} (untested; tested: {tested})"


def version_status(engine) -> VersionStatus:
    return VersionStatus(engine.name, engine.version, tuple(getattr(engine, "tested_versions", ())))


def version_line(engine) -> str:
    return version_status(engine).line


def check_version(engine) -> None:
    """`--strict-version`: refuse an engine version its pack was not tested with (EngineLoadError, one line)."""
    status = version_status(engine)
    if not status.tested:
        raise EngineLoadError(f"{status.line}: refused by --strict-version (run without it to check an untested "
                              "version, or test the pack at this version and add it to its tested_versions)")
