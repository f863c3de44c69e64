"""The one exception every contract raises, and its message format."""

from __future__ import annotations


class Mismatch(Exception):
    """Raised by a check helper; the runner turns it into a ContractViolation."""

    def __init__(self, what: str, expected, observed):
        super().__init__(f"{what}: expected {expected}, observed {observed}")
        self.what, self.expected, self.observed = what, expected, observed


class ContractViolation(AssertionError):
    """`ID [engine=NAME]: statement — what: expected X, observed Y`, then case and repro lines."""

    def __init__(self, contract_id: str, engine: str, statement: str, what: str, expected, observed,
                 case=None, repro: str | None = None):
        self.contract_id, self.engine, self.statement = contract_id, engine, statement
        self.what, self.expected, self.observed = what, expected, observed
        self.case, self.repro = case, repro
        lines = [f"{contract_id} [engine={engine}]: {statement} — {what}: expected {expected}, observed {observed}"]
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


def find_violation(exc, *, chain: bool = True):
    """The ContractViolation behind an exception: itself, a member of an exception group (a Hypothesis FlakyFailure),
    and with `chain` its cause or context (a ledger xfail raised while handling one); None when there is none."""
    seen, todo = set(), [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ContractViolation):
            return e
        todo += [*getattr(e, "exceptions", ()), *((e.__cause__, e.__context__) if chain else ())]
    return None
