"""Contracts with stable ids, registered by the modules in `contracts.catalog`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass
from typing import Callable, FrozenSet, Optional, Tuple, Union

_ID = re.compile(r"^[A-Z][A-Z0-9]*-\d{3}$")
_REGISTRY: dict[str, "Contract"] = {}


@dataclass(frozen=True)
class Contract:
    id: str
    statement: str
    requires: FrozenSet[str]
    check: Callable  # check(engine, case) with `cases`, else check(engine)
    cases: Optional[Callable] = None  # () or (engine=) -> hypothesis strategy of boundary cases
    # Cases that always run (regressions, seed bugs), or examples(engine=) -> such cases, built around the engine.
    examples: Union[Tuple, Callable] = ()
    max_examples: Optional[int] = None
    marks: Tuple[str, ...] = ()  # extra pytest marks, e.g. "stat"

    def strategy(self, engine):
        """The cases' strategy; `cases(engine=...)` where it takes the engine, to draw around the engine's own limits."""
        return self.cases(engine=engine) if "engine" in inspect.signature(self.cases).parameters else self.cases()

    def examples_for(self, engine) -> tuple:
        return tuple(self.examples(engine=engine)) if callable(self.examples) else self.examples


def contract(id: str, statement: str, *, requires, cases=None, examples=(), max_examples=None, marks=()):
    """Register the decorated check function as contract `id`."""
    if not _ID.match(id):
        raise ValueError(f"id: contract ids look like AREA-001, got {id!r}")

    def register(fn):
        if id in _REGISTRY:
            raise ValueError(f"id: contract {id} is registered twice")
        _REGISTRY[id] = Contract(id, statement, frozenset(requires), fn, cases,
                                 examples if callable(examples) else tuple(examples), max_examples, tuple(marks))
        return fn

    return register


def all_contracts() -> dict[str, Contract]:
    """Import every catalog module once and return the contracts sorted by id."""
    import contracts.catalog as catalog

    for info in pkgutil.iter_modules(catalog.__path__):
        importlib.import_module(f"{catalog.__name__}.{info.name}")
    return dict(sorted(_REGISTRY.items()))
