"""Run one contract against one engine: draw cases, check, report violations."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import example, given, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis.database import ExampleDatabase
from hypothesis.errors import FlakyFailure, UnsatisfiedAssumption

from contracts import budget
from contracts.engines import engine_label, engine_spec
from contracts.registry import Contract, all_contracts
from contracts.violation import ContractViolation, HarnessError, Mismatch, find_violation, raising_frame


def _placement(engine):
    """(device, backend) of an engine that chose a verify backend other than torch on the CPU, else None."""
    backend = getattr(engine, "backend", None)
    if backend is None or (engine.device, backend) == ("cpu", "torch"):
        return None
    return engine.device, backend


def repro_line(contract: Contract, engine, case) -> str:
    """One line that replays exactly this case (or re-runs the contract), on the engine's device and backend."""
    spec = engine_spec(engine)
    where = _placement(engine)
    if case is None:
        flags = "" if where is None else f" --device {where[0]} --backend {where[1]}"
        return f"dspark-contracts check --engine {spec}{flags} --contract {contract.id}"
    module = type(case).__module__
    env = "" if where is None else f"DSPARK_DEVICE={where[0]} DSPARK_BACKEND={where[1]} "
    return (f"{env}python -c \"from {module} import *; from contracts.runner import replay; "
            f"replay('{contract.id}', '{spec}', {case!r})\"")


def _call(contract: Contract, engine, case) -> None:
    try:
        contract.check(engine) if contract.cases is None else contract.check(engine, case)
    except Mismatch as m:
        raise ContractViolation(contract.id, engine_label(engine), contract.statement, m.what, m.expected, m.observed,
                                case=case, repro=repro_line(contract, engine, case)) from None
    except (ContractViolation, UnsatisfiedAssumption):  # an engine-declared input limit discards the example
        raise
    except Exception as e:  # an engine crash is a violation too; a crash in the harness's own code is not
        side, where = raising_frame(e)
        if side == "harness":
            raise HarnessError(contract.id, e) from e
        raise ContractViolation(contract.id, engine_label(engine), contract.statement, "call", "no exception",
                                f"{type(e).__name__}: {e}", case=case,
                                repro=repro_line(contract, engine, case), where=where) from e


class ContractDatabase(ExampleDatabase):
    """The configured example database, seen through one contract's namespace: every key Hypothesis uses is
    prefixed with the contract id. All contracts run the same test function, so Hypothesis gives them all one
    database key; through this wrapper each contract replays only its own failures."""

    def __init__(self, inner: ExampleDatabase, contract_id: str):
        super().__init__()
        self.inner, self.contract_id = inner, contract_id
        self._prefix = contract_id.encode() + b"\x00"

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(self._prefix + key, value)

    def fetch(self, key: bytes):
        return self.inner.fetch(self._prefix + key)

    def delete(self, key: bytes, value: bytes) -> None:
        self.inner.delete(self._prefix + key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.move(self._prefix + src, self._prefix + dest, value)

    def __eq__(self, other) -> bool:
        return isinstance(other, ContractDatabase) and (self.inner, self.contract_id) == (other.inner, other.contract_id)

    def __hash__(self) -> int:
        return hash((ContractDatabase, self.contract_id))

    def __repr__(self) -> str:
        return f"ContractDatabase({self.inner!r}, {self.contract_id!r})"


# The seed a derandomized profile runs each contract from: sha384 of the shared test function (`run` below, its source
# and signature, as Hypothesis hashed them) and the contract id, the seed `derandomize` gave each contract while the id
# was added to the test's digest. So a derandomized run draws the examples it always drew (those the engine findings
# were found with), and two contracts with the same strategy draw different ones. Frozen: `run` may change freely.
_DERANDOMIZED = b"    def run(case):\n        _call(contract, engine, case)<Signature (case)>"


def derandomized_seed(contract_id: str) -> int:
    """The fixed seed of `contract_id`'s examples under a derandomized profile (`ci`)."""
    return int.from_bytes(hashlib.sha384(_DERANDOMIZED + contract_id.encode()).digest(), "big")


def run_contract(contract: Contract, engine, *, profile: str | None = None, seed: int | None = None,
                 **settings_overrides) -> None:
    """Run one contract as `dspark-contracts check` does: the contract's own budget (capped by the profile's),
    its pinned examples, the current Hypothesis profile or `profile`. Settings overrides apply to contracts
    with cases; for a fixed-scenario contract they cannot, and asking for them is an error."""
    missing = sorted(contract.requires - set(engine.capabilities))
    if missing:
        pytest.skip(f"engine {engine_label(engine)} lacks capability {', '.join(missing)}")
    with budget.share_of(engine, contract.id, profile):
        _run_contract(contract, engine, profile, seed, settings_overrides)


def _run_contract(contract: Contract, engine, profile, seed, settings_overrides) -> None:
    if contract.cases is None:
        if settings_overrides or seed is not None:
            asked = sorted(settings_overrides) + ([] if seed is None else ["seed"])
            raise ValueError(f"settings_overrides: {contract.id} has no cases, so {asked} cannot apply")
        _call(contract, engine, None)
        return

    def run(case):
        _call(contract, engine, case)
        # Cases that know their distance to the engine's limits steer Hypothesis' target phase to the edges.
        for label, distance in getattr(case, "limit_distances", dict)().items():
            target(-float(distance), label=label)

    base = budget.base_settings()
    overrides = {"report_multiple_bugs": False, **settings_overrides}
    if "max_examples" not in settings_overrides:
        limit = base.max_examples if contract.max_examples is None else min(contract.max_examples, base.max_examples)
        overrides["max_examples"] = budget.scaled(limit)
    # Every contract runs the same `run`, so Hypothesis keys them alike: keep each contract's examples apart in
    # the database, and give each its own fixed seed where the profile is derandomized.
    derandomize = overrides.get("derandomize", base.derandomize)
    database = overrides.get("database", None if derandomize else base.database)  # derandomized: no database
    if database is not None:
        overrides["database"] = ContractDatabase(database, contract.id)
    if seed is None and derandomize:
        seed = derandomized_seed(contract.id)

    test = given(case=contract.strategy(engine))(run)
    if seed is not None:
        test = hypothesis_seed(seed)(test)
    for ex in reversed(contract.examples_for(engine)):
        test = example(case=ex)(test)
    settings(base, **overrides)(test)()


def violation_of(contract: Contract, engine, **settings) -> ContractViolation:
    """Run the contract as `check` does and return the ContractViolation it raised (the one inside a FlakyFailure
    when the failing case passed on replay); AssertionError when it passed or failed otherwise."""
    try:
        run_contract(contract, engine, profile="ci", **settings)
    except (ContractViolation, FlakyFailure) as failure:
        violation = find_violation(failure, chain=False)
        if violation is None:
            raise AssertionError(f"{contract.id} failed without a ContractViolation: {failure!r}") from failure
        return violation
    raise AssertionError(f"{contract.id} passed on {engine.name}: expected it to fail")


def run_with_ledger(contract: Contract, engine) -> None:
    """`run_contract`, with the known-failures ledger applied: a failure the ledger describes is an xfail, any
    other failure fails, and a ledger entry whose contract passes fails (the entry must go) unless it is intermittent
    (its symptom depends on uninitialised memory: the contract is then run again corrected). A FlakyFailure (the
    failing case passed on Hypothesis' replay) is judged by the ContractViolation it holds: known when the ledger
    describes that violation (reported as flaky), a failure otherwise."""
    from contracts import ledger

    known = ledger.engine_entries(engine, contract.id)
    if not known:
        run_contract(contract, engine)
        return
    try:
        run_contract(contract, engine)
    except (ContractViolation, FlakyFailure) as failure:
        flaky = isinstance(failure, FlakyFailure)
        violation = find_violation(failure, chain=False)
        entry = None if violation is None else ledger.match(known, violation)
        if entry is None:  # a failure the ledger does not describe is a failure
            raise
        note = "flaky: the failing case passed on replay; " if flaky else ""
        corrected = ""
        # A finding's failure must not blind its contract; a hardening or by-design entry has nothing to correct.
        if entry.finding is not None and ledger.corrections(engine):
            _check_corrected(contract, engine)
            corrected = "; with the known corrections: passed"
        pytest.xfail(f"known failure ({note}{entry.reason}){corrected}: {str(violation).splitlines()[0]}")
    if any(e.intermittent for e in known):
        # Uninitialised memory held harmless values this run, or values that mask another bug: run it corrected too.
        _check_corrected(contract, engine, "passes over uninitialised memory")
        return
    reasons = "; ".join(e.reason for e in known)
    pytest.fail(f"{contract.id} passes on {engine.name} {engine.version} but is in the known-failures ledger: "
                f"remove the entry ({reasons})")


def _check_corrected(contract: Contract, engine, seen: str = "fails as the ledger knows") -> None:
    """A known failure must not blind its contract: run it again with every known finding's correction applied (in
    memory, never on disk); any failure left is another bug, raised as the contract's failure with a note."""
    from contracts import ledger

    fixes = ledger.corrections(engine)
    if not fixes:
        return
    from contracts.machine import shared_runs

    with pytest.MonkeyPatch.context() as mp, shared_runs(None):  # the corrected code is not the code the runs saw
        for fix in fixes:
            fix(mp)
        try:
            run_contract(contract, engine)
        except (ContractViolation, FlakyFailure) as failure:
            failure.add_note(f"{contract.id} {seen}, and still fails with the known corrections "
                             f"({', '.join(f.__name__ for f in fixes)}) applied: this failure is not the known one")
            raise


def replay(contract_id: str, engine: str, case=None) -> None:
    """Re-run one contract on one case, e.g. from a violation's repro line."""
    from contracts.engines import load_engine

    contract = all_contracts()[contract_id]
    _call(contract, load_engine(engine), case)
    print(f"{contract_id} [engine={engine}]: passed on this case")
