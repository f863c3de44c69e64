"""`check`'s version header and --strict-version (the CLI and the plain pytest plugin), the results table handed over
in memory (so the JSON can go to stdout: `--json -`, `--json /dev/stdout` piped on), and an engine module in the
directory the user runs from, with no PYTHONPATH: in this process, and as a user runs it (a new process, xdist
workers, the repro line pasted where the check ran)."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from contracts.html_report import render
from tests import inprocess
from tests.hermetic import clean_env
from tests.property.test_report_json_html import DOUBLING as REPORT_DOUBLING

TOY = textwrap.dedent("""
    from contracts.adapters.reference import ReferenceAdapter

    class Toy(ReferenceAdapter):
        name = "toy"
        version = "1.1"
        tested_versions = ("1.0",)

    def make():
        return Toy()
""")
UNTESTED = "engine toy 1.1 (untested; tested: 1.0)"
FAST = ("--contract", "SCALE-001", "--contract", "DPSYNC-001", "--profile", "ci")


def _reference_line() -> str:
    import dspark  # late: see test_report_json_html._version

    return f"engine reference {dspark.__version__}"


@pytest.fixture
def toy(tmp_path):
    (tmp_path / "toy_engine.py").write_text(TOY)
    return tmp_path


@pytest.mark.e2e
def test_an_untested_version_runs_and_says_so_in_the_header_the_json_and_the_page(toy):
    out = toy / "r.json"
    p = inprocess.check("--engine", "toy_engine:make", *FAST, "--json", str(out), path=[toy])
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[0] == UNTESTED and p.stdout.count(UNTESTED) == 1, p.stdout  # one header line
    data = json.loads(out.read_text())
    assert (data["engine_version"], data["engine_tested_versions"], data["engine_tested"]) == ("1.1", ["1.0"], False)
    assert data["engine_version_line"] == UNTESTED and data["counts"]["passed"] == 2
    assert f'<span class="version untested">{UNTESTED}</span>' in render([data])


def test_strict_version_refuses_an_untested_version_in_one_line(toy):
    p = inprocess.check("--engine", "toy_engine:make", "--strict-version", *FAST, path=[toy])
    assert p.returncode == 4 and p.stdout == "", p.stdout + p.stderr
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"dspark-contracts: {UNTESTED}: refused by --strict-version"), err


@pytest.mark.e2e
def test_the_reference_engine_is_tested_and_passes_strict_version(tmp_path):
    out = tmp_path / "r.json"
    p = inprocess.check(*FAST, "--strict-version", "--json", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[0] == _reference_line() == "engine reference 0.1.0"
    data = json.loads(out.read_text())
    assert data["engine_tested"] is True and data["engine_version_line"] == _reference_line()
    assert f'<span class="version">{_reference_line()}</span>' in render([data])


def _summary(stdout: str) -> list:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if " dspark contracts " in line)
    return lines[start + 1:]


@pytest.mark.e2e
def test_the_plugin_heads_its_table_with_the_version_line_and_takes_strict_version(toy):
    argv = ("-q", "-p", "no:cacheprovider", "contracts/suite", "--engine", "toy_engine:make", "--contract", "SCALE-001")
    p = inprocess.pytest_run(*argv, env={"CI": "true"}, path=[toy])
    assert p.returncode == 0, p.stdout + p.stderr
    assert _summary(p.stdout)[0] == UNTESTED, p.stdout
    p = inprocess.pytest_run(*argv, "--strict-version", env={"CI": "true"}, path=[toy])
    assert p.returncode == 4 and f"{UNTESTED}: refused by --strict-version" in p.stdout + p.stderr, p.stdout + p.stderr


def test_the_plugin_hands_the_table_to_a_hook_and_still_writes_contracts_json(pytester, tmp_path):
    pytester.makeconftest("""
        pytest_plugins = ['contracts.plugin']

        def pytest_dspark_contracts_table(config, table):
            with open('got.txt', 'a') as f:
                f.write(','.join(sorted(table.rows)) + ' ' + table.engine_info['version_line'] + '\\n')
    """)
    pytester.makepyfile(test_x="from contracts.suite.test_contracts import test_contract")
    out = tmp_path / "r.json"
    result = pytester.runpytest("-p", "no:cacheprovider", "--contract", "DPSYNC-001", "--contracts-json", str(out))
    result.assert_outcomes(passed=1)
    assert (pytester.path / "got.txt").read_text() == f"DPSYNC-001 {_reference_line()}\n"  # once
    assert json.loads(out.read_text())["contracts"][0]["id"] == "DPSYNC-001"


@pytest.mark.e2e
def test_json_on_stdout_is_all_that_goes_there(tmp_path):
    xml = tmp_path / "r.xml"
    p = inprocess.check(*FAST, "--json", "-", "--junitxml", str(xml))
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads(p.stdout)  # nothing else on stdout
    assert data["counts"]["passed"] == 2 and data["engine_version_line"] == _reference_line()
    # The header, pytest's output, the table and the notes go to stderr.
    assert p.stderr.startswith(_reference_line() + "\n") and " dspark contracts " in p.stderr, p.stderr
    assert f"dspark-contracts: wrote {xml}" in p.stderr and xml.exists()


MINE = textwrap.dedent("""
    from contracts.adapters.reference import ReferenceAdapter

    class Mine(ReferenceAdapter):
        name = "mine"
        capabilities = ReferenceAdapter.capabilities - {"ranks"}

    def make():
        return Mine()
""")


@pytest.fixture
def in_tmp_dir(tmp_path, monkeypatch):
    """The current directory is tmp_path, which is on no sys.path entry: `my_engine` is found only as `python -m`
    would find it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    sys.modules.pop("my_engine", None)
    yield tmp_path
    sys.modules.pop("my_engine", None)  # a later test's my_engine.py is another module


@pytest.mark.e2e
def test_a_module_factory_in_the_current_directory_loads_in_process(in_tmp_dir):
    (in_tmp_dir / "my_engine.py").write_text(MINE)
    assert importlib.util.find_spec("my_engine") is None  # not importable as sys.path stands
    p = inprocess.check("--engine", "my_engine:make", *FAST, "--json", "r.json")
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads((in_tmp_dir / "r.json").read_text())
    assert data["engine"] == "mine (my_engine:make)" and data["counts"]["passed"] == 2


# A pack as the adapter guide has it, in two modules: the adapter imports its engine in `__init__` (from the same
# folder), and a method imports one more module lazily.
TWO_PACK = textwrap.dedent("""
    from contracts.adapters.reference import ReferenceAdapter

    class Two(ReferenceAdapter):
        name = "two"

        def __init__(self):
            import two_engine  # the engine, next to this module
            super().__init__()
            self.ops = two_engine

        def greedy_accept(self, inputs):
            import two_lazy  # imported on first use, while the check runs
            return two_lazy.greedy(super(), inputs)
""")


def _two_module_pack(folder):
    (folder / "two_pack.py").write_text(TWO_PACK)
    (folder / "two_engine.py").write_text("KIND = 'engine'\n")
    (folder / "two_lazy.py").write_text("def greedy(base, inputs):\n    return base.greedy_accept(inputs)\n")
    for name in ("two_pack", "two_engine", "two_lazy"):
        sys.modules.pop(name, None)


def test_a_pack_whose_init_imports_its_engine_from_the_current_directory_loads(in_tmp_dir):
    from contracts.engines import load_engine

    _two_module_pack(in_tmp_dir)
    engine = load_engine("two_pack:Two")
    assert engine.ops.KIND == "engine" and str(in_tmp_dir) not in sys.path  # sys.path is left as it was


def test_check_finds_a_two_module_pack_and_its_lazy_imports_from_the_current_directory(in_tmp_dir):
    _two_module_pack(in_tmp_dir)
    p = inprocess.check("--engine", "two_pack:Two", "--contract", "VERIFY-003", "--profile", "ci", "--json", "r.json")
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads((in_tmp_dir / "r.json").read_text())["counts"]["passed"] == 1
    for name in ("two_pack", "two_engine", "two_lazy"):
        sys.modules.pop(name, None)


# The report tests' engine with counts scaled twice, and a `make` factory for a `module:factory` spec.
DOUBLING = REPORT_DOUBLING + "\n\ndef make():\n    return Doubling()\n"


def _console_script() -> list:
    script = Path(sys.executable).parent / "dspark-contracts"
    return [str(script)] if script.exists() else [sys.executable, "-P", "-m", "contracts.cli"]  # -P: no cwd on sys.path


@pytest.mark.e2e
def test_as_a_user_runs_it_on_xdist_workers_with_json_on_dev_stdout_and_the_repro_pasted_there(tmp_path):
    """From the folder holding my_engine.py, no PYTHONPATH: the console script loads it, so do both xdist workers
    (DPSYNC-001 passes and SCALE-001 fails as this engine does, on the workers), stdout piped on holds the JSON alone,
    and the repro line, pasted in that folder, replays the failure."""
    pytest.importorskip("xdist")
    (tmp_path / "my_engine.py").write_text(DOUBLING)
    env = clean_env(CI="true", PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    env.pop("PYTHONPATH", None)
    p = subprocess.run([*_console_script(), "check", "--engine", "my_engine:make", "-n", "2", *FAST, "--json",
                        "/dev/stdout"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stdout + p.stderr
    data = json.loads(p.stdout)
    rows = {r["id"]: r for r in data["contracts"]}
    assert data["engine"] == "doubling (my_engine:make)" and rows["DPSYNC-001"]["result"] == "passed"
    assert rows["SCALE-001"]["failure"]["field"] == "scaled counts", rows
    assert p.stderr.startswith("engine doubling ") and "1 contract(s) failed: SCALE-001" in p.stderr, p.stderr
    repro = rows["SCALE-001"]["failure"]["repro"]
    assert repro.startswith('python -c "') and "'my_engine:make'" in repro, repro
    r = subprocess.run(repro, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "ContractViolation: SCALE-001" in r.stderr, r.stdout + r.stderr
