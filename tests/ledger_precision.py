"""What every ledger precision test asks (tests/<engine>/test_ledger_precision.py): with a second bug put back into
the engine beside a known failure, the contract run as `check` runs it fails, never reported as the known one."""

import pytest
from hypothesis.errors import FlakyFailure

from contracts import ledger
from contracts.registry import all_contracts
from contracts.runner import run_with_ledger
from contracts.violation import ContractViolation, find_violation
from tests.caught import guarded_patches


@pytest.fixture
def ci_profile():
    """run_with_ledger runs under the current profile: pin the derandomized one `check` uses in CI."""
    from hypothesis import settings

    from contracts.plugin import _profile_name

    previous = _profile_name()
    settings.load_profile("ci")
    yield
    settings.load_profile(previous)


def assert_the_run_fails(engine, contract_id, entry, bug):
    """`entry` applies to the engine's contract; with `bug(mp)` in, `run_with_ledger` fails with a ContractViolation:
    one the ledger does not describe, or one it does, and then only through the re-run with every known correction
    applied (an entry without a correction must not describe it). Returns the violation."""
    contract = all_contracts()[contract_id]
    known = ledger.engine_entries(engine, contract_id)
    assert entry in known, f"{entry.engine} {contract_id}: the entry does not apply to {engine.name} {engine.version}"
    with guarded_patches() as mp:
        bug(mp)
        with pytest.raises((ContractViolation, FlakyFailure)) as caught:
            run_with_ledger(contract, engine)
    violation = find_violation(caught.value, chain=False)
    assert violation is not None, repr(caught.value)
    described = ledger.match(known, violation)
    if described is not None:
        notes = "\n".join(getattr(caught.value, "__notes__", []))
        assert described.finding is not None and "still fails with the known corrections" in notes, str(violation)
    return violation
