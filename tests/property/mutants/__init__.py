"""Broken variants of the reference engine: each one re-inserts a bug class.

Every module here exports `MUTANTS`, a list of `Mutant`s. A mutant names the
contracts that must catch it and patches the reference engine while active
(the reference adapter looks dspark functions up at call time, so a patch of a
dspark module or class is what the contracts see).
"""

from __future__ import annotations

import importlib
import pkgutil
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Tuple

import pytest

from tests.caught import guarded_patches


@dataclass(frozen=True)
class Mutant:
    name: str
    catches: Tuple[str, ...]  # contract ids that must fail on this mutant
    patch: Callable[[pytest.MonkeyPatch], None]  # applies the bug with monkeypatch.setattr

    @contextmanager
    def active(self):
        """The bug in place; leaving fails if the patch raised from its own code (tests.caught.guarded_patches)."""
        with guarded_patches() as mp:
            self.patch(mp)
            yield


def all_mutants() -> list:
    out = []
    for info in pkgutil.iter_modules(__path__):
        out.extend(importlib.import_module(f"{__name__}.{info.name}").MUTANTS)
    return out
