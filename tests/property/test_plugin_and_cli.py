"""The plugin and the check command through the entry points a user's command calls, in this process
(`tests.inprocess`): a new interpreter per call cost 2 s. A fresh interpreter runs the check in CI's main job
(the console script), the repro line and the xdist worker (test_report_json_html.py)."""

import json
import textwrap

import pytest

from tests import inprocess


@pytest.mark.e2e
def test_check_prints_the_table_and_writes_json(tmp_path):
    out = tmp_path / "r.json"
    p = inprocess.check("--contract", "HANDOFF-001", "--contract", "DPSYNC-001", "--json", str(out), "--profile", "ci")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "HANDOFF-001  passed" in p.stdout and "DPSYNC-001   passed" in p.stdout
    data = json.loads(out.read_text())
    assert data["engine"] == "reference" and data["counts"]["passed"] == 2 and data["counts"]["failed"] == 0


def test_unknown_engine_fails_fast_with_one_line():
    p = inprocess.check("--engine", "no-such-engine")
    assert p.returncode == 4 and "unknown engine 'no-such-engine'" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


PARTIAL = textwrap.dedent("""
    from contracts.adapters.reference import ReferenceAdapter
    class Partial(ReferenceAdapter):
        name = "partial"
        capabilities = frozenset({"dp-metadata"})
    def make():  # counts its calls, to show the check loads the engine once
        with open(__file__ + ".loads", "a") as f:
            f.write("load\\n")
        return Partial()
""")


@pytest.mark.e2e
def test_engine_from_module_factory_and_env_var(tmp_path):
    # A user's engine that only exposes the dp-metadata level: handoff contracts skip with a reason.
    (tmp_path / "my_engine.py").write_text(PARTIAL)
    out = tmp_path / "r.json"
    p = inprocess.check("--contract", "HANDOFF-001", "--contract", "SCALE-001", "--json", str(out),
                        env={"DSPARK_ENGINE": "my_engine:make"}, path=[tmp_path])
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads(out.read_text())
    rows = {r["id"]: r for r in data["contracts"]}
    assert rows["SCALE-001"]["result"] == "passed"
    assert rows["HANDOFF-001"]["result"] == "skipped" and "lacks capability handoff" in rows["HANDOFF-001"]["detail"]
    # One engine name everywhere: the adapter's name plus the spec it was loaded by.
    label = "partial (my_engine:make)"
    assert data["engine"] == label and data["engine_name"] == "partial" and data["engine_spec"] == "my_engine:make"
    assert {r["engine"] for r in rows.values()} == {label} and f"engine {label} lacks" in rows["HANDOFF-001"]["detail"]
    assert f"engine={label} " in p.stdout
    assert (tmp_path / "my_engine.py.loads").read_text().splitlines() == ["load"]  # loaded once, not per phase


@pytest.mark.e2e
@pytest.mark.parametrize("extra, code, words", [
    (["--contract", "HANDOFF-001"], 3, "nothing ran on engine partial (my_engine:Partial): 1 skipped"),
    (["--contract", "handoff-001", "--contract", "SCALE-001", "--require", "handoff"], 3, "--require handoff: skipped HANDOFF-001"),
])
def test_skips_fail_the_run_only_when_nothing_ran_or_a_required_level_skipped(tmp_path, extra, code, words):
    (tmp_path / "my_engine.py").write_text(PARTIAL)
    p = inprocess.check("--engine", "my_engine:Partial", *extra, path=[tmp_path])
    assert p.returncode == code, p.stdout + p.stderr
    assert words in p.stderr


def test_collect_only_needs_no_engine():
    p = inprocess.pytest_run("--collect-only", "-q", "contracts/suite", "--engine", "not_installed_pkg:Factory")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "test_contract[HANDOFF-001]" in p.stdout


def test_gpu_marker_selection_skips_cleanly_without_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the behaviour on a machine without CUDA")
    p = inprocess.pytest_run("-q", "-m", "b300", "-p", "no:cacheprovider", "--allow-no-gpu", "tests/gpu", "contracts/suite")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "skipped" in p.stdout and " failed" not in p.stdout and " passed" not in p.stdout


def test_plugin_contract_ids_are_checked_too(pytester):
    pytester.makeconftest("pytest_plugins = ['contracts.plugin']")
    pytester.makepyfile(test_x="from contracts.suite.test_contracts import test_contract")
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", "--contract", "handoff-001")
    assert result.ret == 0 and "test_contract[HANDOFF-001]" in result.stdout.str()
    assert "test_contract[HANDOFF-002]" not in result.stdout.str()
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", "--contract", "HANDOF-002")
    assert result.ret == 4 and "unknown contract id 'HANDOF-002'; did you mean HANDOFF-002" in result.stderr.str()
