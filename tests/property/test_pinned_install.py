"""scripts/pinned_install.py, the checks around both engine install scripts, refuses what it should."""

import importlib.metadata as md
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pinned_install.py"
spec = importlib.util.spec_from_file_location("pinned_install", SCRIPT)
pinned_install = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pinned_install)
TORCH = md.version("torch")


def _run(capsys, *argv):
    rc = pinned_install.main(["--log", "t", "--torch", TORCH, *argv])
    return rc, capsys.readouterr().err


def test_preflight_passes_here_and_refuses_another_torch_or_a_conflicting_package(capsys):
    assert _run(capsys, "preflight", "--from-torch", "sympy")[0] == 0
    rc, err = pinned_install.main(["--log", "t", "--torch", "0.0.0", "preflight"]), capsys.readouterr().err
    assert rc == 1 and f"torch is {TORCH}, need exactly 0.0.0" in err
    rc, err = _run(capsys, "preflight", "--refuse-if-installed", "pytest=it conflicts")
    assert rc == 1 and "pytest is installed in this interpreter; it conflicts" in err


@pytest.fixture
def pip_checks(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    before.write_text("old 1.0 requires gone, which is not installed.\n")
    after.write_text("old 1.0 requires gone, which is not installed.\npytest 1 requires torch==9, but you have 2.\n")
    return ["--pip-check-before", str(before), "--pip-check-after", str(after)]


def test_inspect_accepts_exact_pins_and_the_engines_own_skipped_requirements(capsys, pip_checks):
    pins = [f"hypothesis=={md.version('hypothesis')}"]
    rc, err = _run(capsys, "inspect", "--dist", "pytest", "--version", md.version("pytest"), "--forbidden", "^nvidia-.*$",
                   *pip_checks, "--pins", *pins)
    assert rc == 0, err


def test_inspect_refuses_a_moved_pin_a_forbidden_package_and_a_new_pip_problem(capsys, pip_checks, tmp_path):
    (tmp_path / "after").write_text("new 2.0 requires missing, which is not installed.\n")
    rc, err = _run(capsys, "inspect", "--dist", "pytest", "--version", md.version("pytest"), "--forbidden", "^hypothesis$",
                   *pip_checks, "--pins", "hypothesis==0.0.1")
    assert rc == 1
    assert "hypothesis: installed" in err and "pinned 0.0.1" in err
    assert "forbidden package present: hypothesis==" in err
    assert "new pip check problem: new 2.0 requires missing" in err
