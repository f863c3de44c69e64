"""scripts/pinned_install.py, the checks around both engine install scripts, refuses what it should."""

import argparse
import importlib.metadata as md
import importlib.util
from pathlib import Path

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


BEFORE = ["old 1.0 requires gone, which is not installed."]


def _inspect(after, *, forbidden, pins):
    args = argparse.Namespace(log="t", torch=TORCH, dist="pytest", version=md.version("pytest"), forbidden=forbidden,
                              skipped_note="", pins=pins)
    return pinned_install.inspect(args, BEFORE, after)


def test_inspect_accepts_exact_pins_and_the_engines_own_skipped_requirements():
    after = BEFORE + ["pytest 1 requires torch==9, but you have 2."]
    errors = _inspect(after, forbidden="^nvidia-.*$", pins=[f"hypothesis=={md.version('hypothesis')}"])
    assert errors == []


def test_inspect_refuses_a_moved_pin_a_forbidden_package_and_a_new_pip_problem():
    err = "\n".join(_inspect(["new 2.0 requires missing, which is not installed."], forbidden="^hypothesis$",
                             pins=["hypothesis==0.0.1"]))
    assert "hypothesis: installed" in err and "pinned 0.0.1" in err
    assert "forbidden package present: hypothesis==" in err
    assert "new pip check problem: new 2.0 requires missing" in err
