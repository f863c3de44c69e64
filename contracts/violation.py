"""The one exception every contract raises, and its message format."""

from __future__ import annotations

import os
import sys
import traceback as _tb


class Mismatch(Exception):
    """Raised by a check helper; the runner turns it into a ContractViolation."""

    def __init__(self, what: str, expected, observed):
        super().__init__(f"{what}: expected {expected}, observed {observed}")
        self.what, self.expected, self.observed = what, expected, observed


class ContractViolation(AssertionError):
    """`ID [engine=NAME]: statement — what: expected X, observed Y`, then case and repro lines."""

    def __init__(self, contract_id: str, engine: str, statement: str, what: str, expected, observed,
                 case=None, repro: str | None = None, where: str | None = None):
        self.contract_id, self.engine, self.statement = contract_id, engine, statement
        self.what, self.expected, self.observed = what, expected, observed
        self.case, self.repro, self.where = case, repro, where
        lines = [f"{contract_id} [engine={engine}]: {statement} — {what}: expected {expected}, observed {observed}"]
        if where:  # an engine exception: the engine's frame that raised it
            lines.append(f"  raised at: {where}")
        if case is not None:
            lines.append(f"  case: {case!r}")
        if repro:
            lines.append(f"  repro: {repro}")
        super().__init__("\n".join(lines))


def is_engine_crash(what: str) -> bool:
    """Whether a violation's field is a catch-all for an exception no check anticipated (the runner's "call", the
    decode-loop machine's "engine call in ..."), not one of the contract's own checks (which may expect a call to
    succeed, as HANDOFF-010 does)."""
    return what == "call" or what.startswith("engine call")


def find_violation(exc, *, chain: bool = True, kind: type | None = None):
    """The ContractViolation (or `kind`) behind an exception: itself, a member of an exception group (a Hypothesis
    FlakyFailure), and with `chain` its cause or context (a ledger xfail raised while handling one); None when none."""
    kind = kind or ContractViolation
    seen, todo = set(), [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, kind):
            return e
        todo += [*getattr(e, "exceptions", ()), *((e.__cause__, e.__context__) if chain else ())]
    return None


class HarnessError(Exception):
    """An exception raised in the harness's own code (a contract, a strategy, a driver), not the engine's: its own
    result, never read as the engine violating the contract."""

    def __init__(self, contract_id: str, error: BaseException):
        self.contract_id, self.error = contract_id, error
        self.where = raising_frame(error)[1]
        self.traceback = "".join(_tb.format_exception(error))
        first = (str(error).splitlines() or [""])[0]
        super().__init__(f"{contract_id}: harness error (not the engine's): {type(error).__name__}: {first} "
                         f"(raised at {self.where})")


def harness_error(contract_id: str, exc: BaseException):
    """The HarnessError behind a contract test's exception: one `_call` raised, or any exception that holds no
    ContractViolation (raised outside the contract's call: a strategy drawing a case, the runner). None for a
    violation."""
    found = find_violation(exc, kind=HarnessError)
    if found is not None:
        return found
    return None if find_violation(exc) is not None else HarnessError(contract_id, exc)


# Frames that raise on behalf of their caller: libraries, and the neutral dataclasses both sides construct.
_PASS_THROUGH = frozenset({"torch", "numpy", "triton", "hypothesis", "_pytest", "pytest", "pluggy", "typing_extensions"})
_NEUTRAL = ("contracts.boundary", "contracts.violation", "contracts.patching")


def raising_frame(error: BaseException) -> tuple:
    """(side, "file:line in function") of the frame that raised `error`: the innermost frame that is neither a library
    nor neutral. side is "engine" for an adapter (contracts/adapters) or any code outside contracts/ (the engine's
    package, a user's pack), "harness" for the rest of contracts/ (catalog, strategies, scenarios, runner)."""
    frames = list(_tb.walk_tb(error.__traceback__))
    # A rank process's failure, diagnosed by the launcher: the engine ran there (matched by name: no launcher import).
    if any(c.__name__ == "RankFailure" and c.__module__.startswith("contracts.launcher") for c in type(error).__mro__):
        return "engine", _where(*frames[-1]) if frames else "a rank process"
    for frame, line in reversed(frames):
        module = frame.f_globals.get("__name__", "") or ""
        top = module.split(".")[0]
        if top in sys.stdlib_module_names or top in _PASS_THROUGH or module.startswith(_NEUTRAL):
            continue
        if module.startswith("contracts.adapters") or top != "contracts":
            return "engine", _where(frame, line)
        return "harness", _where(frame, line)
    return "harness", _where(*frames[-1]) if frames else "unknown"


def _where(frame, line) -> str:
    """`contracts/catalog/verify.py:12 in check`: the file relative to the longest sys.path root holding it."""
    path = frame.f_code.co_filename
    roots = [r.rstrip(os.sep) + os.sep for r in sys.path if r and path.startswith(r.rstrip(os.sep) + os.sep)]
    if roots:
        path = path[len(max(roots, key=len)):]
    return f"{path}:{line} in {frame.f_code.co_name}"
