"""The known-failures ledger: entries need evidence, and a fixed bug fails the run."""

import pytest

from contracts import ledger
from contracts.ledger import KnownFailure


def test_entry_without_citation_rejected():
    with pytest.raises(ValueError, match="reason"):
        KnownFailure("sglang", "HANDOFF-001", "flaky")


def test_lookup_matches_engine_and_contract():
    entries = (KnownFailure("sglang", "HANDOFF-001", "#123 builder returns None"),)
    assert ledger.lookup("sglang", "HANDOFF-001", entries) is entries[0]
    assert ledger.lookup("reference", "HANDOFF-001", entries) is None


def test_a_known_failure_that_passes_fails_the_run(pytester):
    pytester.makeconftest("""
        import pytest
        from contracts import ledger
        from contracts.ledger import KnownFailure
        pytest_plugins = ['contracts.plugin']

        @pytest.fixture(autouse=True)
        def pretend_broken(monkeypatch):  # undone after each test, so the outer session is unaffected
            monkeypatch.setattr(ledger, "LEDGER", (KnownFailure("reference", "SCALE-001", "evidence: pretend"),))
    """)
    pytester.makepyfile(test_x="from contracts.suite.test_contracts import test_contract")
    result = pytester.runpytest("-k", "SCALE-001 or DPSYNC-001", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*in the known-failures ledger: remove the entry*"])
