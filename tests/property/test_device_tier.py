"""--device / --backend (and their env twins) checked before any work, shown in every report; `pytest -m b300`
without CUDA; scripts/gpu_check.sh as far as a CPU machine can run it."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from contracts import validation
from contracts.adapters.reference import ReferenceAdapter
from contracts.cli import main
from contracts.registry import all_contracts
from contracts.runner import repro_line
from tests import inprocess
from tests.hermetic import SELECTIONS, clean_env

ROOT = Path(__file__).resolve().parents[2]
# At import, outside any in-process inner session (pytester restores sys.modules after one, not the registry).
CONTRACTS = all_contracts()
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks what happens without CUDA")
interpreter = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the Triton interpreter")


@pytest.fixture(autouse=True)
def _no_placement_env(monkeypatch):
    for var in SELECTIONS:
        monkeypatch.delenv(var, raising=False)


# --- the checks ----------------------------------------------------------------------------------------------------


def test_defaults_auto_and_case():
    assert validation.placement(pack=ReferenceAdapter) == ("cpu", "auto", "torch")  # auto on the CPU is torch (SGLang's rule)
    assert validation.placement(" CPU ", "Torch", pack=ReferenceAdapter) == ("cpu", "torch", "torch")


@pytest.mark.parametrize("device, backend, env, words", [
    ("gpu", None, {}, "--device: expected one of cpu, cuda, got 'gpu'"),
    (None, "tritn", {}, "--backend: expected one of torch, triton, auto, got 'tritn'"),
    (None, None, {"DSPARK_DEVICE": "tpu"}, "DSPARK_DEVICE: expected one of cpu, cuda, got 'tpu'"),
    (None, None, {"DSPARK_BACKEND": "jax"}, "DSPARK_BACKEND: expected one of torch, triton, auto, got 'jax'"),
    (None, "triton", {"TRITON_INTERPRET": "0"}, "--backend: 'triton' on cpu runs the Triton interpreter, but "
                                                "TRITON_INTERPRET='0'"),
    (5, None, {}, "--device: expected one of cpu, cuda, got 5"),
])
def test_bad_placements_name_the_flag_or_variable(monkeypatch, device, backend, env, words):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError) as e:
        validation.placement(device, backend, pack=ReferenceAdapter)
    assert str(e.value).startswith(words) and "\n" not in str(e.value)


def test_a_flag_beats_its_env_twin(monkeypatch):
    monkeypatch.setenv("DSPARK_DEVICE", "tpu")
    assert validation.placement("cpu", pack=ReferenceAdapter).device == "cpu"


@no_cuda
def test_cuda_without_cuda_is_one_line_and_exit_2(capsys, monkeypatch):
    with pytest.raises(ValueError, match="^--device: 'cuda' requested, but .*(without CUDA|no CUDA device)"):
        validation.placement("cuda", pack=ReferenceAdapter)
    assert main(["check", "--device", "cuda"]) == 2  # refused by the argument checks, before pytest or the engine
    err = capsys.readouterr().err
    assert err.startswith("dspark-contracts: --device: 'cuda' requested, but ") and len(err.splitlines()) == 1, err
    monkeypatch.setenv("DSPARK_DEVICE", "cuda")
    assert main(["check"]) == 2
    assert "DSPARK_DEVICE: 'cuda' requested" in capsys.readouterr().err


def test_compiled_triton_refuses_the_interpreter_flag(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU machine
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(ValueError, match="^--backend: 'triton' on cuda runs compiled kernels, but TRITON_INTERPRET=1"):
        validation.placement("cuda", "triton", pack=ReferenceAdapter)
    with pytest.raises(ValueError, match=r"^--backend: 'auto' \(triton\) on cuda runs compiled kernels"):
        validation.placement("cuda", pack=ReferenceAdapter)  # auto picks triton on cuda: the same refusal
    assert validation.placement("cuda", "torch", pack=ReferenceAdapter) == ("cuda", "torch", "torch")


def test_an_engine_that_cannot_honour_the_placement_is_refused():
    own = SimpleNamespace(name="own", device="cpu")  # runs its own kernels: no `backend`
    validation.engine_placement(own, validation.placement(pack=ReferenceAdapter))  # auto: the engine's choice
    with pytest.raises(ValueError, match="^--backend torch: engine 'own' runs its own verify kernels"):
        validation.engine_placement(own, validation.Placement("cpu", "torch", "torch"))
    with pytest.raises(ValueError, match="^--device cuda: engine 'own' runs on cpu"):
        validation.engine_placement(own, validation.Placement("cuda", "auto", "triton"))
    other = SimpleNamespace(name="x", device="cpu", backend="torch")
    with pytest.raises(ValueError, match="^--backend triton: engine 'x' verifies with 'torch'"):
        validation.engine_placement(other, validation.Placement("cpu", "triton", "triton"))


def test_check_refuses_a_backend_the_engine_does_not_take(tmp_path, monkeypatch, capsys):
    (tmp_path / "own_engine.py").write_text(
        "from contracts.adapters.reference import ReferenceAdapter\n"
        "class Own(ReferenceAdapter):\n    name = 'own'\n    backend = None\n"
        "    def __init__(self):\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["check", "--engine", "own_engine:Own", "--backend", "torch"]) == 2  # after the load, before pytest
    assert capsys.readouterr().err.splitlines() == [
        "dspark-contracts: --backend torch: engine 'own' runs its own verify kernels (it does not take a backend)"]


def test_an_adapter_backend_must_be_a_name():
    from contracts.adapters.reference import ReferenceAdapter

    bad = ReferenceAdapter()
    bad.backend = 3
    with pytest.raises(TypeError, match="^backend: expected a non-empty str or None, got 3$"):
        validation.validate_adapter(bad)


def test_the_plugin_checks_its_options_before_any_test(pytester):
    pytester.makeconftest("pytest_plugins = ['contracts.plugin']")
    pytester.makepyfile(test_x="def test_x():\n    raise AssertionError('must not run')")
    result = pytester.runpytest("--contracts-backend", "tritn", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--contracts-backend: expected one of torch, triton, auto, got 'tritn'*"])


# --- the reports ---------------------------------------------------------------------------------------------------


@pytest.mark.e2e
@interpreter
def test_table_json_html_and_header_show_device_and_backend(tmp_path):
    out, html = tmp_path / "r.json", tmp_path / "r.html"
    p = inprocess.check("--backend", "triton", "--contract", "VERIFY-003", "--profile", "ci", "--json", str(out), "--html", str(html))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "engine=reference 0.1.0: device=cpu, backend=triton (Triton interpreter)" in p.stdout.splitlines()
    data = json.loads(out.read_text())
    assert (data["engine_device"], data["engine_backend"]) == ("cpu", "triton")
    page = html.read_text()
    assert "device=cpu, backend=triton (Triton interpreter)" in page and "reference 0.1.0 cpu/triton" in page


def test_the_check_restores_the_environment(monkeypatch, capsys):
    """main() may run in-process: the device and backend it exports for its session do not outlive it."""
    monkeypatch.setenv("DSPARK_BACKEND", "torch")
    monkeypatch.setattr("contracts.cli._run_check", lambda args: 0 if os.environ["DSPARK_DEVICE"] == "cpu" else 1)
    assert main(["check", "--backend", "auto"]) == 0
    assert os.environ["DSPARK_BACKEND"] == "torch" and "DSPARK_DEVICE" not in os.environ


def test_every_report_row_carries_the_backend():
    from contracts.adapters.reference import ReferenceAdapter
    from contracts.report import ContractTable, engine_properties

    props = dict(engine_properties(ReferenceAdapter()))
    assert (props["dspark_engine_device"], props["dspark_engine_backend"]) == ("cpu", "torch")
    table = ContractTable("reference")
    table.record(CONTRACTS["VERIFY-003"], "passed", 0.1, "", props)
    data = table.as_dict()
    assert (data["engine_device"], data["engine_backend"]) == ("cpu", "torch")
    assert table.lines()[0] == "engine=reference 0.1.0: device=cpu, backend=torch"
    own = dict(engine_properties(SimpleNamespace(name="own", version="1", device="cpu", capabilities=frozenset())))
    assert own["dspark_engine_backend"] == ""  # an engine without a backend: JSON null, "the engine's own"
    table = ContractTable("own")
    table.record(CONTRACTS["VERIFY-003"], "passed", 0.1, "", own)
    assert table.as_dict()["engine_backend"] is None and "backend=the engine's own" in table.lines()[0]


def test_plugin_header_names_device_and_backend(pytester):
    pytester.makeconftest("pytest_plugins = ['contracts.plugin']")
    pytester.makepyfile(test_x="def test_x():\n    pass")
    result = pytester.runpytest("--contracts-backend", "torch", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["engine: reference (loaded on first use), device=cpu, backend=torch"])
    assert result.ret == 0


def test_repro_lines_replay_on_the_same_device_and_backend():
    contract = CONTRACTS["VERIFY-003"]
    gpu = SimpleNamespace(name="reference", device="cuda", backend="triton")
    assert repro_line(contract, gpu, None) == \
        "dspark-contracts check --engine reference --device cuda --backend triton --contract VERIFY-003"
    from contracts.strategies.verify import TIE_CASE

    assert repro_line(contract, gpu, TIE_CASE).startswith("DSPARK_DEVICE=cuda DSPARK_BACKEND=triton python -c ")
    cpu = SimpleNamespace(name="reference", device="cpu", backend="torch")
    assert repro_line(contract, cpu, TIE_CASE).startswith("python -c ")  # the default needs no prefix


# --- pytest -m b300 and the GPU script -------------------------------------------------------------------------------


@pytest.mark.e2e
@no_cuda
def test_b300_without_cuda_collects_and_skips_everything():
    p = inprocess.pytest_run("-m", "b300", "-q", "-p", "no:cacheprovider", "--allow-no-gpu", "-rs")  # -rs: per file
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    summary = p.stdout.strip().splitlines()[-1]
    assert " skipped" in summary and "passed" not in summary and "failed" not in summary and "error" not in summary
    n_contracts = len(CONTRACTS)
    assert f"SKIPPED [{n_contracts}] tests/gpu/test_contracts_cuda.py" in p.stdout  # the contract suite on CUDA


def test_gpu_check_parses():
    p = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


@pytest.mark.e2e
@no_cuda
def test_gpu_check_without_cuda_says_so_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=clean_env(OUT_DIR=str(out), PYTHON=sys.executable),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 3 and not out.exists(), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "no CUDA device" in p.stderr and "nothing ran" in p.stderr


def _dry_run(tmp_path):
    p = subprocess.run(["bash", str(SCRIPT), "--dry-run"], cwd=ROOT,
                       env=clean_env(OUT_DIR=str(tmp_path), PYTHON=sys.executable), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    steps = [shlex.split(line[2:]) for line in p.stdout.splitlines() if line.startswith("+ ")]
    assert len(steps) == 3 and all(s[0] == "timeout" and s[1].isdigit() and int(s[1]) > 0 and s[2] == sys.executable
                                  for s in steps), steps
    return [s[3:] for s in steps]  # without `timeout N python`


@pytest.mark.e2e
def test_gpu_check_steps_are_runnable_commands(tmp_path):
    """Each step as the script would run it: the pytest steps collect (their files, markers and options exist),
    the contract step's arguments are valid up to the device (on a CPU machine: the one-line CUDA refusal)."""
    tests, contracts, bench = _dry_run(tmp_path)
    for step in (tests, bench):
        assert step[:2] == ["-m", "pytest"], step
        p = inprocess.pytest_run(*step[2:], "--collect-only", *([] if torch.cuda.is_available() else ["--allow-no-gpu"]))
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr
        assert "test_bench_gpu" in p.stdout if step is bench else "test_verify_gpu" in p.stdout
    assert contracts[:3] == ["-m", "contracts.cli", "check"]
    from contracts.cli import build_parser

    args = build_parser().parse_args(contracts[2:])
    assert (args.device, args.backend, args.json.endswith("contracts.json")) == ("cuda", "triton", True)


def test_bench_summary_table(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "gpu"))
    try:
        import bench_summary
    finally:
        sys.path.pop(0)
    cell = lambda us, frac: {"median_us": us, "gb_per_s": 4000 * frac, "fraction_of_copy_bw": frac, "min_bytes": 1}  # noqa: E731
    data = {"gpu_greedy_bfloat16": {"triton": cell(150.0, 0.85), "torch_eager": cell(900.0, 0.14),
                                    "flashinfer": "n/a: FlashInfer has no greedy verify", "copy_bw_gb_per_s": 4000.0,
                                    "env": {"device": "NVIDIA H200", "torch": "2.x"}},
            "gpu_sampling_draft_probs": {"triton": cell(400.0, 0.6), "flashinfer": cell(350.0, 0.7),
                                         "torch_eager": cell(3000.0, 0.08), "copy_bw_gb_per_s": 4000.0,
                                         "env": {"device": "NVIDIA H200"}},
            "cpu_greedy_vs_argmax_float32": {"ratio_min": 1.1}}
    text = bench_summary.table(data)
    assert "| gpu_greedy_bfloat16 | triton | 150.0 | 3400 | 0.85 | bandwidth met |" in text
    assert "| gpu_sampling_draft_probs | triton | 400.0 | 2400 | 0.60 | bandwidth missed; vs FlashInfer slower |" in text
    assert "n/a: FlashInfer has no greedy verify" in text and "cpu_greedy" not in text
    (tmp_path / "v.json").write_text(json.dumps(data))
    assert bench_summary.main([str(tmp_path / "v.json")]) == 0
    assert bench_summary.main([str(tmp_path / "missing.json")]) == 0
