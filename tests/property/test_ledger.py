"""The known-failures ledger: entries need evidence and a version range, match one field on the versions they cover,
and a fixed bug fails the run."""

import pytest

from contracts import ledger
from contracts.ledger import KnownFailure
from contracts.violation import ContractViolation


def _violation(contract_id="VERIFY-001", what="sampled: bonus (row 2)"):
    return ContractViolation(contract_id, "sglang", "statement", what, "x", "y")


def test_entry_without_citation_rejected():
    with pytest.raises(ValueError, match="reason"):
        KnownFailure("sglang", "==0.5.23", "HANDOFF-001", "call", "flaky")


def test_entry_without_version_or_with_a_bad_field_rejected():
    with pytest.raises(ValueError, match="^versions: "):
        KnownFailure("sglang", "", "HANDOFF-001", "call", "#1")
    with pytest.raises(ValueError, match="^versions: not a version specifier"):
        KnownFailure("sglang", "0.5.23 or so", "HANDOFF-001", "call", "#1")
    with pytest.raises(ValueError, match="field"):
        KnownFailure("sglang", "==0.5.23", "HANDOFF-001", "(", "#1")


def test_entries_match_engine_version_and_contract():
    entry = KnownFailure("sglang", "==0.5.23", "VERIFY-001", r"sampled: bonus", "#123 bonus")
    assert ledger.entries((entry,), "sglang", "0.5.23", "VERIFY-001") == (entry,)
    assert ledger.entries((entry,), "sglang", "0.5.24", "VERIFY-001") == ()
    assert ledger.entries((entry,), "reference", "0.5.23", "VERIFY-001") == ()
    assert ledger.entries((entry,), "sglang", "0.5.23", "VERIFY-002") == ()


@pytest.mark.parametrize("version, applies", [
    ("0.5.22", False), ("0.5.23", True), ("0.5.24", True), ("0.5.24.dev3+g1a2b3c", True),  # a source tree's build
    ("0.5.25.dev3+g1a2b3c", False), ("0.5.25", False), ("0.6.0rc1", False),
])
def test_an_entry_stops_applying_outside_its_version_range(version, applies):
    entry = KnownFailure("sglang", ">=0.5.23,<0.5.25", "VERIFY-001", r"sampled", "#1")
    assert bool(ledger.entries((entry,), "sglang", version, "VERIFY-001")) is applies


def test_a_version_that_is_not_pep440_matches_only_its_own_pin():
    entry = KnownFailure("deepspec", "===3f2a9c1", "VERIFY-001", r"sampled", "#1")  # a commit as the version
    assert ledger.entries((entry,), "deepspec", "3f2a9c1", "VERIFY-001") == (entry,)
    assert ledger.entries((entry,), "deepspec", "3f2a9c2", "VERIFY-001") == ()


def test_every_pack_entry_is_valid_and_names_its_pack():
    """Each installed pack's entries parse (version range, regexes, citation) and name an engine of that pack."""
    from contracts.engines import engine_names, pack_class

    for name in engine_names():
        cls = pack_class(name)
        for entry in cls.known_failures:
            assert isinstance(entry, KnownFailure)
            assert entry.engine.split("-")[0] == cls.name.split("-")[0], (name, entry)


def test_only_the_named_field_is_a_known_failure():
    entry = KnownFailure("sglang", "==0.5.23", "VERIFY-001", r"^sampled: bonus", "#123 bonus")
    assert ledger.match((entry,), _violation()) is entry
    assert ledger.match((entry,), _violation(what="greedy: bonus (row 0)")) is None
    assert ledger.match((entry,), _violation(what="sampled: correct_len (row 0)")) is None


def test_an_entry_for_a_crash_names_the_exception():
    entry = KnownFailure("vllm", "==0.32.0", "VERIFY-001", r"^call$", "#1 crash", observed=r"^RuntimeError: ")
    crash = lambda observed: ContractViolation("VERIFY-001", "vllm", "statement", "call", "no exception", observed)  # noqa: E731
    assert ledger.match((entry,), crash("RuntimeError: selected index k out of range")) is entry
    assert ledger.match((entry,), crash("TypeError: 'NoneType' object is not callable")) is None  # an adapter bug
    with pytest.raises(ValueError, match="observed"):
        KnownFailure("vllm", "==0.32.0", "VERIFY-001", r"^call$", "#1", observed="(")


_CONFTEST = """
    import pytest
    from contracts.ledger import KnownFailure
    pytest_plugins = ['contracts.plugin']

    @pytest.fixture(autouse=True)
    def pretend_broken(monkeypatch, engine):  # undone after each test, so the outer session is unaffected
        monkeypatch.setattr(engine, "known_failures", (KnownFailure("reference", "==" + engine.version, "SCALE-001",
                                                                    {field!r}, "evidence: pretend"{extra}),))
        {mutate}
"""


@pytest.mark.e2e
def test_a_known_failure_that_passes_fails_the_run(pytester):
    pytester.makeconftest(_CONFTEST.format(field="scaled", mutate="pass", extra=""))
    pytester.makepyfile(test_x="from contracts.suite.test_contracts import test_contract")
    result = pytester.runpytest("-k", "SCALE-001 or DPSYNC-001", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*in the known-failures ledger: remove the entry*"])


@pytest.mark.e2e
def test_an_intermittent_known_failure_may_pass(pytester):
    """An entry whose symptom depends on uninitialised memory stays when its contract passes on this machine."""
    pytester.makeconftest(_CONFTEST.format(field="scaled", mutate="pass", extra=", intermittent=True"))
    pytester.makepyfile(test_x="from contracts.suite.test_contracts import test_contract")
    result = pytester.runpytest("-k", "SCALE-001", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


_BREAK_SCALING = ('import dspark.spec_info as si; '
                  'monkeypatch.setattr(si, "spec_scale_global_num_tokens", lambda w, g, l: ([x + 1 for x in g], list(l)))')


def test_a_failure_of_the_listed_field_is_known_and_another_field_is_not(pytester):
    pytester.makeconftest(_CONFTEST.format(field="^scaled counts$", mutate=_BREAK_SCALING, extra=""))
    pytester.makepyfile(test_x="from contracts.suite.test_contracts import test_contract")
    result = pytester.runpytest("-k", "SCALE-001", "-p", "no:cacheprovider")
    assert result.ret == 0 and result.parseoutcomes().get("known") == 1  # pytest counts it as the table: a known failure
    pytester.makeconftest(_CONFTEST.format(field="^scaled logprob counts$", mutate=_BREAK_SCALING, extra=""))
    result = pytester.runpytest("-k", "SCALE-001", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)


def _flaky_scaling(monkeypatch):
    """SCALE-001 broken the first time it sees each input only: the failing case passes when Hypothesis replays it
    (FlakyFailure), as a case does on an engine whose verdict depends on leftover memory."""
    import dspark.spec_info as si

    real, seen = si.spec_scale_global_num_tokens, set()

    def scale(widths, counts, logprob_counts):
        key = (widths.num_tokens_per_req, tuple(counts), tuple(logprob_counts))
        scaled, scaled_lp = real(widths, counts, logprob_counts)
        first = key not in seen
        seen.add(key)
        return ([c + 1 for c in scaled] if first else scaled), scaled_lp

    monkeypatch.setattr(si, "spec_scale_global_num_tokens", scale)


@pytest.fixture
def ci_profile():
    """run_with_ledger runs under the current profile: pin the derandomized one, so which of the mutant's failures
    Hypothesis meets first (the per-count or the linearity field) is the same every run."""
    from hypothesis import settings

    from contracts.plugin import _profile_name

    previous = _profile_name()
    settings.load_profile("ci")
    yield
    settings.load_profile(previous)


@pytest.mark.parametrize("field, known", [("^scaled counts$", True), ("^scaled logprob counts$", False)])
def test_a_flaky_failure_is_judged_by_the_violation_it_holds(monkeypatch, ci_profile, field, known):
    from hypothesis.errors import FlakyFailure

    from contracts.adapters.reference import ReferenceAdapter
    from contracts.registry import all_contracts
    from contracts.runner import run_contract, run_with_ledger

    engine, contract = ReferenceAdapter(), all_contracts()["SCALE-001"]
    _flaky_scaling(monkeypatch)
    with pytest.raises(FlakyFailure):  # the premise: without the ledger, this failure is flaky
        run_contract(contract, engine, profile="ci")
    monkeypatch.setattr(engine, "known_failures", (KnownFailure("reference", "==" + engine.version, "SCALE-001", field,
                                                                "evidence: pretend"),))
    if known:
        with pytest.raises(pytest.xfail.Exception, match=r"known failure \(flaky: .*SCALE-001 \[engine=reference\]"):
            run_with_ledger(contract, engine)
    else:
        with pytest.raises(FlakyFailure):
            run_with_ledger(contract, engine)


def test_every_entry_is_a_complete_finding_or_hardening():
    """A finding carries its upstream status, production path, severity and a standalone repro that exists; an entry
    without one must be about a contract its pack lists as hardening (inputs the engine's producers never emit) or as
    by design (a rule the engine changed on purpose upstream, with the reference)."""
    from pathlib import Path

    from contracts.engines import engine_names, pack_class

    root = Path(__file__).resolve().parents[2]
    for name in engine_names():
        cls = pack_class(name)
        for entry in cls.known_failures:
            if entry.finding is None:
                assert entry.contract_id in {**getattr(cls, "hardening", {}), **getattr(cls, "by_design", {})}, \
                    (name, entry.contract_id)
                continue
            f = entry.finding
            assert f.status.startswith(("known: ", "not found")) and f.path and f.severity, (name, entry.contract_id)
            assert (root / f.repro).is_file() and f.repro.startswith(f"findings/{cls.name.split('-')[0]}/"), f.repro
