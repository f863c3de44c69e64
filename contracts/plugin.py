"""The pytest plugin: markers, Hypothesis profiles, `--engine`, the contract table.

Loaded by this repo's root conftest; other repos use `-p contracts.plugin`.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from contracts import profiles
from contracts.engines import EngineLoadError, chosen_engine, load_engine
from contracts.report import ContractTable

profiles.register()  # at import, so `--hypothesis-profile dev` resolves in Hypothesis' own configure

MARKERS = {
    "cpu": "runs without an accelerator (added to every test not marked gpu/b300/bench)",
    "gpu": "needs a CUDA device; also tagged b300 so GPU runners select it with -m b300",
    "b300": "runs on the B300 GPU runners; b300-only tests also need compute capability 10.3",
    "bench": "a benchmark (pytest-benchmark); collected only when -m mentions bench",
    "stat": "a statistical contract with a fixed seed and a stated false-alarm rate",
    "slow": "takes more than a few seconds",
    "contract(id)": "the contract a test checks (set by the packaged suite)",
}
_TABLE = pytest.StashKey[ContractTable]()
_ENGINE = pytest.StashKey[object]()
_CONFIG = None  # the running session's config, for report hooks that get no config


def pytest_addoption(parser):
    group = parser.getgroup("dspark-contracts")
    group.addoption("--engine", default=None,
                    help="engine under test: an entry point name or module:factory (default: $DSPARK_ENGINE, else reference)")
    group.addoption("--contracts-json", default=None, metavar="PATH", help="write the contract x result table as JSON")
    group.addoption("--contract", action="append", default=[], metavar="ID", help="run only these contract ids")


def pytest_configure(config):
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if config.getoption("hypothesis_profile", None) is None:
        settings.load_profile(profiles.default_profile())
    config.stash[_TABLE] = ContractTable(engine=chosen_engine(config.getoption("engine")))
    global _CONFIG
    _CONFIG = config


@pytest.fixture(scope="session")
def engine(pytestconfig):
    """The adapter of the engine under test, loaded once, on first use."""
    if _ENGINE not in pytestconfig.stash:
        try:
            pytestconfig.stash[_ENGINE] = load_engine(chosen_engine(pytestconfig.getoption("engine")))
        except EngineLoadError as e:
            pytest.exit(f"dspark-contracts: {e}", returncode=4)
    return pytestconfig.stash[_ENGINE]


def _cuda_capability():
    import torch

    return torch.cuda.get_device_capability() if torch.cuda.is_available() else None


def pytest_collection_modifyitems(config, items):
    wanted = set(config.getoption("contract"))
    bench_selected = "bench" in (config.getoption("markexpr") or "")
    keep, dropped = [], []
    capability = None
    for item in items:
        marks = {m.name for m in item.iter_markers()}
        contract_mark = item.get_closest_marker("contract")
        if wanted and (contract_mark is None or contract_mark.args[0] not in wanted):
            dropped.append(item)
            continue
        if "bench" in marks and not bench_selected:
            dropped.append(item)
            continue
        keep.append(item)
        if contract_mark is not None:
            item.user_properties.append(("dspark_contract", contract_mark.args[0]))
        if not marks & {"gpu", "b300", "bench"}:
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
    spec = chosen_engine(config.getoption("engine"))
    lines = [f"dspark-contracts: hypothesis profile={settings._current_profile}"]
    try:
        eng = load_engine(spec)
        config.stash[_ENGINE] = eng
        lines.append(f"engine: {eng.name} {eng.version} on {eng.device}; capabilities: {', '.join(sorted(eng.capabilities))}")
    except EngineLoadError as e:
        lines.append(f"engine: {spec} (not loaded: {e})")
    env = {k: v for k, v in os.environ.items() if k.startswith("DSPARK_")}
    if env:
        lines.append("env: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
    return lines


def pytest_runtest_logreport(report):
    # user_properties survive xdist's worker -> controller serialisation.
    contract_id = dict(report.user_properties).get("dspark_contract")
    if contract_id is None or _CONFIG is None:
        return
    from contracts.registry import all_contracts

    contract, table = all_contracts()[contract_id], _CONFIG.stash[_TABLE]
    if hasattr(report, "wasxfail"):
        table.record(contract, "known-failure", report.duration, report.wasxfail)
    elif report.skipped:
        detail = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        table.record(contract, "skipped", report.duration, detail)
    elif report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        detail = crash.message.splitlines()[0] if crash is not None and crash.message else report.when
        table.record(contract, "failed", report.duration, detail)
    else:
        table.record(contract, "passed", report.duration)


def pytest_terminal_summary(terminalreporter, config):
    table = config.stash[_TABLE]
    if not table.rows:
        return
    terminalreporter.section("dspark contracts")
    for line in table.lines():
        terminalreporter.write_line(line)
    path = config.getoption("contracts_json")
    if path:
        table.write_json(path)
