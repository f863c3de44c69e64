"""`check --coverage`: the engine's own DSpark code measured, rank processes included; bad input is one line."""

import json
import sys

import pytest

from contracts import reach
from contracts.cli import main

pytestmark = pytest.mark.skipif(reach.coverage_missing() is not None, reason="coverage.py is not installed")


@pytest.mark.e2e
def test_coverage_reports_each_declared_module(tmp_path, capsys):
    out = tmp_path / "run.json"
    # RANKS-001 runs in rank processes only: its code counts only if the children are measured.
    assert main(["check", "--coverage", "--contract", "RANKS-001", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["coverage"]
    assert [r["module"] for r in rows] == ["dspark"]
    assert rows[0]["statements"] > 1000 and 0 < rows[0]["covered"] < rows[0]["statements"]
    text = capsys.readouterr().out
    assert "coverage of reference's DSpark code" in text and "dspark " in text


def test_module_files_are_found_without_importing(monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "dspark.demo", raising=False)
    files = reach.module_files("dspark.demo")
    assert len(files) == 1 and files[0].endswith("dspark/demo.py") and "dspark.demo" not in sys.modules
    assert len(reach.module_files("dspark.verify")) >= 5 and reach.module_files("dspark.nope") == []


@pytest.mark.e2e
def test_rank_processes_are_measured(tmp_path):
    """The DP rank program (dspark.dp_runner's RankProgram.step) runs only in the ranks: it is covered."""
    folder = tmp_path / "cov"
    folder.mkdir()
    with reach.measured_child(["dspark.dp_runner"], str(folder)) as run:
        code = run([sys.executable, "-m", "contracts.cli", "check", "--contract", "RANKS-001"])
    assert code == 0
    (row,) = run.rows
    assert row.covered > 0.6 * row.statements, row


def test_coverage_without_coverage_py_is_exit_2_with_the_install_line(monkeypatch, capsys):
    monkeypatch.setattr(reach, "coverage_missing", lambda: "--coverage: needs coverage.py, which is not installed "
                                                          "(pip install coverage)")
    assert main(["check", "--coverage"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "dspark-contracts: --coverage: needs coverage.py, which is not installed (pip install coverage)"]


def test_coverage_modules_that_do_not_exist_are_named_exit_4(tmp_path, monkeypatch, capsys):
    (tmp_path / "odd_pack.py").write_text(
        "from contracts.adapters.reference import ReferenceAdapter\n"
        "class Odd(ReferenceAdapter):\n    coverage_modules = ('dspark.planner', 'dspark.no_such_module')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert main(["check", "--coverage", "--engine", "odd_pack:Odd", "--contract", "PLAN-001"]) == 4
    err = capsys.readouterr().err
    assert err.splitlines() == ["dspark-contracts: engine 'odd_pack:Odd': its pack's coverage_modules "
                                "dspark.no_such_module do not exist in the installed engine"], err


@pytest.mark.e2e
def test_a_baseline_names_the_lines_this_run_newly_covered(tmp_path, capsys):
    """Against a run of one contract, a run of another reports exactly the engine lines the first did not execute."""
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    assert main(["check", "--coverage", "--contract", "PLAN-001", "--json", str(first)]) == 0
    base = json.loads(first.read_text())["coverage_lines"]
    assert base and all(f.startswith("dspark/") for f in base)
    capsys.readouterr()
    assert main(["check", "--coverage", "--contract", "RANKS-001", "--coverage-baseline", str(first),
                 "--json", str(second)]) == 0
    data = json.loads(second.read_text())
    new = data["coverage_new"]
    assert new == reach.newly_covered(data["coverage_lines"], base)
    assert any(f == "dspark/dp_runner.py" for f in new)  # only RANKS-001 runs the DP rank program
    assert all(not set(lines) & set(base.get(f, ())) for f, lines in new.items())
    assert "newly covered" in capsys.readouterr().out


def test_newly_covered_and_its_table():
    new = reach.newly_covered({"a.py": [1, 2, 3, 7], "b.py": [4]}, {"a.py": [2], "b.py": [4]})
    assert new == {"a.py": [1, 3, 7]}
    assert reach.new_lines_table(new) == "3 line(s) newly covered in 1 file(s)\n  a.py: 1, 3, 7"
    assert reach._ranges([1, 2, 3, 5, 8, 9]) == "1-3, 5, 8-9"


@pytest.mark.parametrize("argv, message", [
    (["--coverage-baseline", "x.json"], "--coverage-baseline: compares a --coverage run with an earlier one; add --coverage"),
    (["--coverage", "--coverage-baseline", "/no/such.json"], "--coverage-baseline: no such file '/no/such.json'"),
])
def test_a_bad_baseline_is_one_line_exit_2(argv, message, capsys):
    assert main(["check", *argv]) == 2
    assert capsys.readouterr().err.splitlines() == [f"dspark-contracts: {message}"]


def test_a_baseline_without_coverage_lines_is_refused(tmp_path, capsys):
    other = tmp_path / "plain.json"
    other.write_text(json.dumps({"runs": []}))
    assert main(["check", "--coverage", "--coverage-baseline", str(other)]) == 2
    assert "is not the --json of a `check --coverage` run" in capsys.readouterr().err
