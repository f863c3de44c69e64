"""What every meta-test asks of a contract that caught a bug put back into an engine (the reference's mutants, the
bugs re-inserted into SGLang and vLLM), and the patching that lets it tell a broken patch from the bug it models."""

import functools
import os
import types
from contextlib import contextmanager
from pathlib import Path

import pytest

from contracts.violation import is_engine_crash

_TESTS = str(Path(__file__).parent) + os.sep  # every mutant and re-inserted bug is written under here


def _raised_in_tests(exc: BaseException) -> bool:
    """Whether the innermost frame of `exc`'s traceback is test code (a string test: it runs on every exception
    a patched function lets through)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename.startswith(_TESTS)


class GuardedMonkeyPatch(pytest.MonkeyPatch):
    """Each function it patches in notes any exception raised in the patch's own code, not in the engine code it
    calls: a stale signature, a lookup that fails. Contracts catch engine exceptions and report them as data, so
    only here can such a failure be told from the bug the patch models."""

    def __init__(self):
        super().__init__()
        self.own_errors: list = []

    def setattr(self, target, name, *value, **kwargs):
        return super().setattr(target, name, *(self._guarded(v) if isinstance(v, types.FunctionType) else v
                                               for v in value), **kwargs)

    def _guarded(self, fn):
        @functools.wraps(fn)
        def guarded(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                if _raised_in_tests(e):  # an engine call with the wrong arity lands in this frame too
                    self.own_errors.append(e)
                raise
        return guarded


@contextmanager
def guarded_patches():
    """A monkeypatch context that fails on leaving if a patched-in function raised from its own code."""
    mp = GuardedMonkeyPatch()
    try:
        yield mp
    finally:
        mp.undo()
    if mp.own_errors:
        e = mp.own_errors[0]
        raise AssertionError(f"the patch itself raised {type(e).__name__}: {e} ({len(mp.own_errors)} times): it "
                             "models no bug until fixed")


def violation_with(patch, contract, engine, **settings):
    """The contract's violation as `check` runs it (contracts.runner.violation_of), with the bug `patch(mp)` puts
    into the engine applied through guarded_patches."""
    from contracts.runner import violation_of

    with guarded_patches() as mp:
        patch(mp)
        return violation_of(contract, engine, **settings)


def assert_caught(violation, contract, engine) -> None:
    """The violation is this contract's on this engine, and its repro line replays it there; the shrunk case passes
    on the engine as it is when called (the intact one), so the failure was the bug's. A fixed-scenario contract has
    no case to replay."""
    name = engine.name
    # The contract's own check, not a catch-all for an engine exception: a bug that only crashes proves nothing.
    assert not is_engine_crash(violation.what), f"caught by an engine exception, not by the contract: {violation}"
    assert violation.contract_id == contract.id and violation.engine == name, str(violation)
    assert f"'{name}'" in violation.repro or f"--engine {name}" in violation.repro, violation.repro
    if contract.cases is not None:
        assert violation.case is not None
        contract.check(engine, violation.case)
