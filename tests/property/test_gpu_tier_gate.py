"""`pytest -m b300` and `check --device cuda` without a usable CUDA device: one line saying the GPU tier needs CUDA,
unless the run says --allow-no-gpu (then the tier is collected and skipped, or `check` says it skipped it)."""

import pytest
import torch

from contracts.cli import main
from contracts.plugin import _selects_gpu_tier
from tests import inprocess
from tests.hermetic import SELECTIONS

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks what happens without CUDA")


@pytest.fixture(autouse=True)
def _no_placement_env(monkeypatch):
    for var in SELECTIONS:
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("expr, selects", [("b300", True), ("gpu", True), ("b300 or cpu", True), ("cpu", False),
                                           ("not b300", False), ("cpu and not gpu", False), ("bench", False), ("", False),
                                           # names no GPU marker: the GPU tests it selects are skipped without CUDA
                                           ("not nightly", False), ("not bench and not e2e", False),
                                           ("not (cpu or nightly)", False)])
def test_which_marker_expressions_select_the_gpu_tier(expr, selects):
    assert _selects_gpu_tier(expr) is selects


@no_cuda
def test_b300_without_cuda_is_one_line_and_runs_nothing():
    p = inprocess.pytest_run("-m", "b300", "-q", "-p", "no:cacheprovider", "tests/gpu")
    assert p.returncode == pytest.ExitCode.USAGE_ERROR, p.stdout[-2000:] + p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "the GPU tier needs CUDA" in lines[0] and "--allow-no-gpu" in lines[0], p.stderr
    assert "skipped" not in p.stdout and "passed" not in p.stdout


@no_cuda
def test_an_expression_naming_no_gpu_marker_runs_without_cuda_and_skips_the_gpu_tests():
    p = inprocess.pytest_run("-m", "not nightly", "-q", "-p", "no:cacheprovider", "tests/gpu")
    assert p.returncode in (0, pytest.ExitCode.NO_TESTS_COLLECTED), p.stdout[-2000:] + p.stderr
    assert "the GPU tier needs CUDA" not in p.stdout + p.stderr


@no_cuda
def test_b300_with_allow_no_gpu_collects_and_skips():
    p = inprocess.pytest_run("-m", "b300", "-q", "-p", "no:cacheprovider", "--allow-no-gpu", "tests/gpu")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    summary = p.stdout.strip().splitlines()[-1]
    assert " skipped" in summary and "passed" not in summary and "failed" not in summary, summary


def test_cpu_runs_are_not_gated():
    p = inprocess.pytest_run("-m", "cpu", "-q", "-p", "no:cacheprovider", "--collect-only", "tests/property/test_stats.py")
    assert p.returncode == 0 and "the GPU tier" not in p.stderr, p.stderr


@no_cuda
def test_check_device_cuda_without_cuda_says_the_gpu_tier_needs_it(capsys):
    assert main(["check", "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "the GPU tier needs CUDA" in err and "--allow-no-gpu" in err, err


@no_cuda
def test_check_with_allow_no_gpu_skips_the_tier_and_exits_0(capsys, monkeypatch):
    monkeypatch.setattr("contracts.cli._run_check", lambda args: pytest.fail("must not run the contracts"))
    assert main(["check", "--device", "cuda", "--allow-no-gpu"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("dspark-contracts: GPU tier skipped (--allow-no-gpu): --device: 'cuda' requested"), out
    assert main(["check", "--device", "cuda", "--allow-no-gpu", "--contract", "NOPE-001"]) == 2  # still checked
    assert "--contract: unknown contract id" in capsys.readouterr().err
