"""The pytest plugin: markers, Hypothesis profiles, `--engine`, the contract table.

Loaded by this repo's root conftest; other repos use `-p contracts.plugin`.

The finished table is handed over in memory: at session end (on the controller, under
pytest-xdist, where the workers' rows are merged) the plugin calls the hook
`pytest_dspark_contracts_table(config, table)` with the `ContractTable`. `Preloaded`,
which `dspark-contracts check` passes to `pytest.main(plugins=...)`, implements it and
keeps the table as its `table` attribute; `--contracts-json PATH` writes it as JSON.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

import pytest
from hypothesis import settings

from contracts import heap, profiles
from contracts.engines import EngineLoadError, chosen_engine, load_engine, pack_class
from contracts.report import HARDENING, HARNESS_ERROR, HARNESS_KEYS, ContractTable, engine_properties, failure_properties, share_properties
from contracts.violation import HarnessError, find_violation, harness_error

OPT_IN = ("bench", "e2e", "nightly", "triton")  # collected only when -m names them
profiles.register()  # at import, so `--hypothesis-profile dev` resolves in Hypothesis' own configure

MARKERS = {
    "cpu": "runs without an accelerator (added to every test not marked gpu/b300/bench/e2e/nightly/triton)",
    "gpu": "needs a CUDA device; also tagged b300 so GPU runners select it with -m b300",
    "b300": "runs on the B300 GPU runners; b300-only tests also need compute capability 10.3",
    "bench": "a benchmark (pytest-benchmark); collected only when -m mentions bench",
    "nightly": "repetition and depth for the nightly run; collected only when -m mentions nightly",
    "triton": "runs the Triton kernels through the interpreter for a minute or more; collected only when -m mentions triton",
    "stat": "a statistical contract with a fixed seed and a stated false-alarm rate",
    "e2e": "end to end: a whole check or pytest session, a new interpreter, spawned ranks waiting out a timeout; collected only "
           "when -m mentions e2e (CI runs `pytest -m e2e` as its own step)",
    "contract(id)": "the contract a test checks (set by the packaged suite)",
}
_TABLE = pytest.StashKey[ContractTable]()
_ENGINE = pytest.StashKey[object]()
_PLACEMENT = pytest.StashKey[object]()  # contracts.validation.Placement
_SAVED_ENV = pytest.StashKey[dict]()
_PRELOADED = pytest.StashKey[bool]()
_LOAD_WARNINGS = pytest.StashKey[list]()
_HYPOTHESIS_HOME = pytest.StashKey[object]()  # Hypothesis' home folder before `check` moved it


class _Hooks:
    @pytest.hookspec
    def pytest_dspark_contracts_table(self, config, table):
        """The session's finished contract x result table (`contracts.report.ContractTable`), once, at session
        finish: on the controller under pytest-xdist (its rows are every worker's), never on a worker."""


def pytest_addhooks(pluginmanager):
    pluginmanager.add_hookspecs(_Hooks)


def pytest_addoption(parser):
    group = parser.getgroup("dspark-contracts")
    group.addoption("--engine", default=None,
                    help="engine under test: an entry point name or module:factory (default: $DSPARK_ENGINE, else reference)")
    group.addoption("--contracts-json", default=None, metavar="PATH", help="write the contract x result table as JSON")
    group.addoption("--strict-version", action="store_true", default=False,
                    help="refuse (exit 4) an engine version its pack was not tested with (its tested_versions)")
    group.addoption("--hardening", action="store_true", default=False,
                    help="also run the engine's hardening contracts (inputs its own producers never emit)")
    group.addoption("--contract", action="append", default=[], metavar="ID", help="run only these contract ids")
    group.addoption("--contracts-progress", action="store_true", default=False,
                    help="print one line per contract as it finishes (id, result, time) instead of dots")
    group.addoption("--contracts-verbose", action="store_true", default=False,
                    help="under each known failure in the table, its ledger evidence and repro line")
    group.addoption("--contracts-show-warnings", action="store_true", default=False,
                    help="after the table, every distinct warning raised while the contracts ran, in full")
    group.addoption("--allow-no-gpu", action="store_true", default=False,
                    help="let -m b300 (the GPU tier) run without a CUDA device: every GPU test is collected and skipped")
    group.addoption("--contracts-device", default=None, metavar="cpu|cuda",
                    help="where the engine's verify level runs (default: $DSPARK_DEVICE, else cpu)")
    group.addoption("--contracts-backend", default=None, metavar="torch|triton|auto",
                    help="verify ops backend: torch, triton (interpreted on cpu, compiled on cuda) or auto "
                         "(triton on cuda, torch on cpu; default: $DSPARK_BACKEND, else auto)")


def pytest_configure(config):
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if config.getoption("hypothesis_profile", None) is None:
        settings.load_profile(profiles.default_profile())
    if os.environ.get("DSPARK_HYPOTHESIS_HOME"):  # set by `check`: no .hypothesis/ in the user's directory
        from hypothesis import configuration

        config.stash[_HYPOTHESIS_HOME] = getattr(configuration, "__hypothesis_home_directory", None)
        configuration.set_hypothesis_home_dir(os.environ["DSPARK_HYPOTHESIS_HOME"])
        _rebuild_profiles()
    config.stash[_TABLE] = table = ContractTable(engine=chosen_engine(config.getoption("engine")))
    for w in config.stash.get(_LOAD_WARNINGS, ()):
        table.note_warning(w.category.__name__, str(w.message), f"{w.filename}:{w.lineno}")
    _configure_placement(config)
    _check_gpu_tier(config)
    if config.getoption("contract"):  # a typo would otherwise select nothing, silently
        from contracts.registry import all_contracts
        from contracts.validation import contract_ids

        try:
            config.option.contract = contract_ids(config.getoption("contract"), all_contracts())
        except ValueError as e:
            raise pytest.UsageError(str(e)) from None
    # Per config, not a module global: an in-process inner session (pytester) must not take over the outer table.
    config.pluginmanager.register(_Recorder(config), "dspark-contracts-recorder")


def _selects_gpu_tier(markexpr: str) -> bool:
    """Whether `-m EXPR` asks for the GPU tier: it names b300 or gpu and selects a test marked only those. `-m b300`
    does; `-m cpu`, `-m "not b300"` and `-m "not nightly"` (which names no GPU marker: the GPU tests it also selects
    are collected and skipped without CUDA, as under plain `pytest`) do not."""
    import re

    if not markexpr or not re.search(r"\b(b300|gpu)\b", markexpr):
        return False
    from _pytest.mark.expression import Expression  # pytest's own -m parser; a bad expression is pytest's to report

    try:
        return bool(Expression.compile(markexpr).evaluate(lambda name, /, **kwargs: name in ("b300", "gpu")))
    except Exception:  # noqa: BLE001 - pytest reports the expression itself
        return False


def _check_gpu_tier(config) -> None:
    """`-m b300` without a usable CUDA device stops with one line, unless --allow-no-gpu (then every GPU test is
    collected and skipped: what the CPU CI checks)."""
    if config.getoption("allow_no_gpu") or not _selects_gpu_tier(config.getoption("markexpr") or ""):
        return
    from contracts.validation import cuda_missing

    missing = cuda_missing()
    if missing:
        raise pytest.UsageError(f"-m {config.getoption('markexpr')}: the GPU tier needs CUDA, but {missing} "
                                "(--allow-no-gpu collects it and skips every test)")


def _configure_placement(config) -> None:
    """Check --contracts-device/--contracts-backend (or their env twins) now, before any test runs, and hand
    them to the adapter (and xdist workers, rank processes) through $DSPARK_DEVICE / $DSPARK_BACKEND."""
    from contracts.validation import placement, placement_env, set_env

    device, backend = config.getoption("contracts_device"), config.getoption("contracts_backend")
    try:
        pack = pack_class(chosen_engine(config.getoption("engine")))
    except EngineLoadError:
        pack = None  # the engine fixture reports it, where the run needs the engine
    try:
        where = placement(device, backend, pack=pack, device_flag="--contracts-device", backend_flag="--contracts-backend")
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    config.stash[_PLACEMENT] = where
    config.stash[_SAVED_ENV] = set_env(placement_env(where, pack=pack, device=device is not None,
                                                     backend=backend is not None))


def pytest_unconfigure(config):
    from contracts.validation import restore_env

    restore_env(config.stash.get(_SAVED_ENV, {}))  # an in-process session (pytester) leaves no trace
    if _HYPOTHESIS_HOME in config.stash:
        from hypothesis.configuration import set_hypothesis_home_dir

        set_hypothesis_home_dir(config.stash[_HYPOTHESIS_HOME])
        _rebuild_profiles()


class Preloaded:
    """Hands an adapter that is already loaded to the session, so it is not loaded twice, and takes the finished
    contract table back (`table`: None until the session finishes, or when pytest stopped before a session began).

    `dspark-contracts check` loads the engine before pytest starts (to fail fast with
    one line) and passes this to `pytest.main(plugins=...)`; xdist workers still load their own.
    """

    def __init__(self, engine, load_warnings=()):
        self.engine = engine
        self.table = None
        self.load_warnings = list(load_warnings)  # warnings.WarningMessage raised while the engine loaded

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config):
        config.stash[_LOAD_WARNINGS] = self.load_warnings
        config.stash[_ENGINE] = self.engine
        config.stash[_PRELOADED] = True  # its loader showed the version line already
        heap.settle()

    def pytest_dspark_contracts_table(self, config, table):
        self.table = table


@pytest.fixture(scope="session")
def engine(pytestconfig):
    """The adapter of the engine under test, loaded once, on first use."""
    if _ENGINE not in pytestconfig.stash:
        from contracts.validation import engine_placement

        try:
            engine = load_engine(chosen_engine(pytestconfig.getoption("engine")),
                                 strict_version=pytestconfig.getoption("strict_version"))
        except EngineLoadError as e:
            pytest.exit(f"dspark-contracts: {e}", returncode=4)
        try:
            engine_placement(engine, pytestconfig.stash[_PLACEMENT])
        except ValueError as e:
            pytest.exit(f"dspark-contracts: {e}", returncode=2)
        pytestconfig.stash[_ENGINE] = engine
        heap.settle()
    return pytestconfig.stash[_ENGINE]


@pytest.fixture(scope="session")
def machine_runs():
    """This session's decode-loop machine runs: LOOP-001..004 check their families over one run of them all
    (contracts.machine.shared_runs)."""
    return {}


def _cuda_capability():
    import torch

    return torch.cuda.get_device_capability() if torch.cuda.is_available() else None


def pytest_collection_modifyitems(config, items):
    wanted = set(config.getoption("contract"))
    markexpr = config.getoption("markexpr") or ""
    not_opted_in = {m for m in OPT_IN if m not in markexpr}
    keep, dropped = [], []
    capability = None
    for item in items:
        marks = {m.name for m in item.iter_markers()}
        contract_mark = item.get_closest_marker("contract")
        if wanted and (contract_mark is None or contract_mark.args[0] not in wanted):
            dropped.append(item)
            continue
        if marks & not_opted_in:
            dropped.append(item)
            continue
        keep.append(item)
        if contract_mark is not None:
            item.user_properties.append(("dspark_contract", contract_mark.args[0]))
        if not marks & {"gpu", "b300", *OPT_IN}:
            item.add_marker(pytest.mark.cpu)
        if "gpu" in marks or "b300" in marks:
            capability = capability or (_cuda_capability() or ("none",))
            if "gpu" in marks:
                item.add_marker(pytest.mark.b300)
            if capability == ("none",):
                item.add_marker(pytest.mark.skip(reason="no CUDA device"))
            elif "gpu" not in marks and capability != (10, 3) and os.environ.get("DSPARK_GPU_TIER") != "b300":
                item.add_marker(pytest.mark.skip(reason=f"needs a B300 (sm_103), found sm_{capability[0]}{capability[1]}"))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_report_header(config):
    # The engine is named, not loaded: loading stays lazy (collection, and runs that select no contract).
    spec = chosen_engine(config.getoption("engine"))
    where = config.stash[_PLACEMENT]
    lines = [f"dspark-contracts: hypothesis profile={_profile_name()}",
             f"engine: {spec} (loaded on first use), device={where.device}, backend={_backend_text(where, spec)}"]
    env = {k: v for k, v in os.environ.items() if k.startswith("DSPARK_")}
    if env:
        lines.append("env: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
    return lines


def _backend_text(where, spec: str) -> str:
    """The backend as the chosen engine resolves it: `auto` left to an engine that runs its own kernels says so."""
    if where.requested != "auto":
        text = where.backend
    elif where.backend == "auto":  # the pack takes no backend: it runs its own kernels
        text = "the engine's own"
    else:
        text = f"auto ({where.backend} for {spec})"
    return text + (", Triton interpreter" if where.interpreted else "")


def _rebuild_profiles() -> None:
    """A profile other than Hypothesis' default caches its example database on first use, under the home folder of
    that moment: after the home moves (an in-process `check` after another session), build them anew."""
    name = _profile_name()
    profiles.register()
    settings.load_profile(name)


def _profile_name() -> str:
    return settings.get_current_profile_name()  # public since Hypothesis 6.139.0


def _hypothesis_info(config) -> dict:
    current = settings.default
    seed = config.getoption("hypothesis_seed", None)
    return {"profile": _profile_name(), "derandomize": bool(current.derandomize), "max_examples": current.max_examples,
            "seed": None if seed is None else str(seed), "database": current.database is not None}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    # Runs where the test ran (an xdist worker too): the engine and the violation are only here.
    report = yield
    if item.get_closest_marker("contract") is None:
        return report
    if _ENGINE in item.config.stash:
        engine = item.config.stash[_ENGINE]
        report.user_properties.extend(engine_properties(engine))
        report.user_properties.extend(share_properties(engine, item.get_closest_marker("contract").args[0],
                                                       _profile_name()))
    exc = None if call.excinfo is None else call.excinfo.value
    props = []
    if exc is not None and report.failed and not isinstance(exc, pytest.fail.Exception):  # Failed: the ledger's word
        error = find_violation(exc, chain=False, kind=HarnessError) or harness_error(
            item.get_closest_marker("contract").args[0], exc)
        props = [] if error is None else [(HARNESS_KEYS[0], str(error)), (HARNESS_KEYS[1], error.traceback)]
    violation = None if exc is None or props else find_violation(exc)
    if violation is not None:
        props = failure_properties(violation)
        if report.failed and item.config.getoption("tbstyle", "auto") == "auto":
            report.longrepr = _violation_text(violation)
    report.user_properties.extend(props)
    item.user_properties.extend(props)  # the teardown report carries them on, into --junitxml
    return report


def _violation_text(violation) -> str:
    """An engine's violation under pytest's default traceback style: the violation itself (field, expected/observed,
    the raising frame, the repro line with its case), not ~40 lines of the harness's own frames around it, which say
    nothing about the engine. An explicit --tb (check passes short) keeps pytest's traceback."""
    lines = [f"{violation.contract_id} [engine={violation.engine}] — {violation.what}: expected {violation.expected}, "
             f"observed {violation.observed}"]
    lines += [f"  raised at: {violation.where}"] if violation.where else []
    lines += [f"  repro: {violation.repro}"] if violation.repro else []
    return "\n".join(lines + ["(the statement is in the table below; the harness's traceback: --tb=short)"])


KNOWN_FAILURES, HARDENING_NOT_RUN = "known failures", "hardening not run"  # the table's words, in pytest's counts


@pytest.hookimpl(wrapper=True)
def pytest_report_teststatus(report, config):
    result = yield
    props = dict(report.user_properties)
    if not result or "dspark_contract" not in props:
        return result
    category, letter, word = result
    # pytest's last line counts what the table counts: a ledger xfail as a known failure, a hardening contract
    # left out as not run (not one more skip), so the two lines agree.
    if hasattr(report, "wasxfail") and report.skipped:
        category = KNOWN_FAILURES
    elif report.skipped and "dspark_hardening" in props:
        category = HARDENING_NOT_RUN
    if config.getoption("contracts_progress"):
        letter = ""  # the progress line replaces the dot
    return category, letter, word


class _Recorder:
    """Turns the session's contract reports into table rows (and progress lines)."""

    def __init__(self, config):
        self.config = config

    def pytest_warning_recorded(self, warning_message, when, nodeid, location):
        # Relayed to the controller under xdist; counted in the table and printed after it.
        if when == "runtest" and ("::test_contract[" in nodeid or "::test_contract_on_cuda[" in nodeid):
            w = warning_message
            self.config.stash[_TABLE].note_warning(w.category.__name__, str(w.message), f"{w.filename}:{w.lineno}")

    def pytest_runtest_logreport(self, report):
        # user_properties survive xdist's worker -> controller serialisation.
        props = dict(report.user_properties)
        contract_id = props.get("dspark_contract")
        if contract_id is None:
            return
        from contracts.registry import all_contracts

        contract, table = all_contracts()[contract_id], self.config.stash[_TABLE]
        if hasattr(report, "wasxfail"):
            outcome, detail = "known-failure", report.wasxfail
        elif report.skipped:
            detail = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            outcome = HARDENING if detail.removeprefix("Skipped: ").startswith(f"{HARDENING}:") else "skipped"
            detail = detail.removeprefix("Skipped: ") if outcome == HARDENING else detail
        elif report.failed and HARNESS_KEYS[0] in props:
            outcome, detail = HARNESS_ERROR, props[HARNESS_KEYS[0]]
        elif report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            outcome, detail = "failed", crash.message.splitlines()[0] if crash is not None and crash.message else report.when
        else:
            outcome, detail = "passed", ""
        row = table.record(contract, outcome, report.duration, detail, props)
        if report.when == "teardown" and self.config.getoption("contracts_progress"):
            terminal = self.config.pluginmanager.get_plugin("terminalreporter")
            if terminal is not None:
                terminal.write_line(table.progress_line(row), flush=True)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    config = session.config
    if hasattr(config, "workerinput"):  # an xdist worker: its rows reach the controller in its reports
        return
    table = config.stash[_TABLE]
    table.hypothesis = _hypothesis_info(config)
    table.date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    path = config.getoption("contracts_json")
    if path:  # written even when no contract ran, so a caller can tell "none ran" from "crashed"
        table.write_json(path)
    config.hook.pytest_dspark_contracts_table(config=config, table=table)


def pytest_terminal_summary(terminalreporter, config):
    if hasattr(config, "workerinput"):
        return
    _skip_summary(terminalreporter)
    table = config.stash[_TABLE]
    if not table.rows:
        return
    terminalreporter.section("dspark contracts")
    # Among other tests (`pytest -m cpu`) the table is one part of the run: only the rows that need reading.
    brief = _other_tests(terminalreporter) and not config.getoption("contracts_verbose")
    # The engine's version line heads the table, unless `check` printed it before the session.
    for line in table.lines(version_line=not config.stash.get(_PRELOADED, False),
                            verbose=config.getoption("contracts_verbose"),
                            show_warnings=config.getoption("contracts_show_warnings"), brief=brief,
                            width=_width(terminalreporter)):
        terminalreporter.write_line(line)


def _other_tests(terminalreporter) -> bool:
    """Whether the session ran tests besides the contract suite (`pytest -m cpu`); read from the reports, which
    reach the controller under xdist (its items do not)."""
    return any(getattr(r, "when", None) in ("call", "setup") and "dspark_contract" not in dict(r.user_properties)
               for reports in terminalreporter.stats.values() for r in reports if hasattr(r, "user_properties"))


def _width(terminalreporter) -> int:
    """The terminal's width, at least 80 columns; 140 where the output is no terminal (a CI log, a pipe, an xdist
    worker, which sets COLUMNS=80 for none), as there is no width to fit."""
    from contracts.table_text import WIDTH

    if not terminalreporter.isatty:
        return WIDTH
    return max(80, terminalreporter._tw.fullwidth)


def _skip_summary(terminalreporter) -> None:
    """Every skip counted by its reason, one line each: a skip here is a test for an engine, a device or a capability
    this machine or engine lacks, and says which (contract rows are the table's, below)."""
    reasons: dict = {}
    for report in terminalreporter.stats.get("skipped", ()):
        if "dspark_contract" in dict(report.user_properties) or not isinstance(report.longrepr, tuple):
            continue
        reason = report.longrepr[2].removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    if not reasons:
        return
    terminalreporter.section("skipped tests")
    terminalreporter.write_line(f"{sum(reasons.values())} skipped, by reason (a test of an engine or a device this "
                                "machine lacks skips by design: each engine installs on its own, see its docs/engines "
                                "page; -rs lists each test):")
    for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"  {n:>4}  {reason}")
