"""`--backend triton` on the CPU: the verify contracts run through the Triton kernels in the interpreter.

What makes that claim testable: a kernel broken in one place (a copy of `dspark.verify.triton_kernels` with one
line changed, served by the dispatcher) fails the contract that owns that behaviour, while the torch reference is
untouched; the same contracts pass on the real kernels (`test_check_with_the_triton_backend_passes`, marked
`triton`: a minute and a half, run with `pytest -m triton`). Also: an fp32 engine is held to every verify law
except the two exact-law contracts, which need `verify.float64`, and would fail them without that tag.
"""

import dataclasses
import importlib
import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch
from hypothesis import Phase

import dspark.verify.dispatch as dispatch
from contracts import oracle
from contracts.adapters.reference import ReferenceAdapter
from contracts.adapters.reference.placement import load_kernels
from contracts.boundary.verify import VerifyCase
from contracts.protocol import VERIFY, VERIFY_FLOAT64
from contracts.registry import all_contracts
from contracts.runner import run_contract
from contracts.strategies.verify import build
from contracts.triton_interpreter import skip_dead_overflow_checks, skip_repeated_language_patches
from contracts.violation import ContractViolation
from tests.hermetic import run_python

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "dspark" / "verify" / "triton_kernels.py"
CONTRACTS = all_contracts()
VERIFY_LEVEL = sorted(cid for cid, c in CONTRACTS.items() if VERIFY in c.requires)

interpreter = pytest.mark.skipif(
    torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1",
    reason="the Triton interpreter is selected only without CUDA (root conftest); tests/gpu covers compiled kernels")


def _mutant_kernels(tmp_path, old: str, new: str):
    """A copy of the kernel module with `old` replaced once by `new`, imported from a file (triton.jit reads the
    source), interpreted exactly like the real one."""
    source = KERNELS.read_text()
    assert source.count(old) >= 1, f"mutation target not found: {old!r}"
    source = source.replace(old, new, 1)
    source = source.replace("from .reference import", "from dspark.verify.reference import")
    source = source.replace("from .results import", "from dspark.verify.results import")
    name = f"mutant_kernels_{abs(hash((old, new)))}"
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.INTERPRETED
    return module


FIND = (Phase.explicit, Phase.reuse, Phase.generate)
# (what breaks, the line as written, the broken line, the contract that owns the behaviour)
MUTATIONS = [
    ("argmax tie across vocabulary tiles goes to the later tile",
     "take = (tile_max > best_val) | (best_idx < 0)", "take = (tile_max >= best_val) | (best_idx < 0)", "VERIFY-003"),
    ("greedy cap off by one", "capped = tl.minimum(raw, vl - 1)", "capped = tl.minimum(raw, vl)", "VERIFY-003"),
    ("sampling accept test not strict", "accepted = (q_d > 0) & (u * q_d < p_d)",
     "accepted = (q_d > 0) & (u * q_d <= p_d)", "VERIFY-005"),
    ("residual ignores the draft", "residual = tl.maximum(p - q, 0.0)", "residual = tl.maximum(p, 0.0)", "LOSSLESS-001"),
    ("finalize commits one token too many", "commit = correct + 1", "commit = correct + 2", "VERIFY-001"),
]


@interpreter
@pytest.mark.parametrize("what, old, new, contract_id", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_a_broken_kernel_fails_its_contract_on_the_triton_backend(tmp_path, monkeypatch, what, old, new, contract_id):
    mutant = _mutant_kernels(tmp_path, old, new)
    calls = []

    def kernels():
        calls.append(1)
        return mutant

    monkeypatch.setattr(dispatch, "_kernels", kernels)
    contract = CONTRACTS[contract_id]
    with pytest.raises(ContractViolation) as caught:  # found as the check finds it; not shrunk (interpreter time)
        run_contract(contract, ReferenceAdapter(backend="triton"), profile="ci", phases=FIND)
    assert caught.value.contract_id == contract_id and calls, what
    # The torch twin never reaches the kernels, so the same contract passes on it under the same patch.
    calls.clear()
    run_contract(contract, ReferenceAdapter(backend="torch"), profile="ci", max_examples=20)
    assert not calls


@interpreter
def test_the_triton_backend_calls_the_kernels_for_every_op(monkeypatch):
    seen = []
    real = dispatch._kernels()

    class Spy:
        def __getattr__(self, op):
            seen.append(op)
            return getattr(real, op)

    monkeypatch.setattr(dispatch, "_kernels", lambda: Spy())
    for cid in ("VERIFY-002", "VERIFY-006"):  # greedy + block (finalize), and mixed
        run_contract(CONTRACTS[cid], ReferenceAdapter(backend="triton"), profile="ci", max_examples=5)
    assert {"greedy_accept", "sampling_accept", "finalize", "INTERPRETED"} <= set(seen), seen


@interpreter
def test_the_interpreter_skips_only_the_overflow_checks_nothing_reads(monkeypatch):
    """With `debug` on the sanitiser's asserts fire, so its checks stay; with it off they are dead code, and the
    pack's kernel load turns them off (the contracts above then run without them)."""
    from triton.runtime import interpreter as triton_interpreter

    builder = triton_interpreter.interpreter_builder
    monkeypatch.setattr(builder, "options", dataclasses.replace(builder.options, sanitize_overflow=True, debug=True))
    assert not skip_dead_overflow_checks() and builder.options.sanitize_overflow
    monkeypatch.setattr(builder, "options", dataclasses.replace(builder.options, debug=False))
    load_kernels("cpu")
    assert not builder.options.sanitize_overflow
    assert not skip_dead_overflow_checks()  # already off: nothing to do


# A kernel calling device functions from two modules: one sees `triton.language` as the kernel does (already
# patched inside the launch), one sees only `triton.language.core` (not patched by this launch: it must patch).
_NESTED = {
    "nested_tl": """
import triton
import triton.language as tl

@triton.jit
def twice(x):
    return x * 2
""",
    "nested_core": """
import triton
import triton.language.core as tlc

@triton.jit
def low(ptr, offs, n):
    return tlc.load(ptr + offs, mask=offs < n, other=0)
""",
    "nested_kernel": """
import triton
import triton.language as tl
from nested_tl import twice
from nested_core import low

@triton.jit
def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    y = twice(low(x_ptr, offs, n))
    for _ in range(3):
        y = twice(y) - y
    tl.store(out_ptr + offs, y, mask=offs < n)
""",
}


@interpreter
def test_nested_jit_calls_skip_only_the_patching_their_launch_did(tmp_path, monkeypatch):
    """The same results with the skip as without; each launch still patches (the state ends with the launch);
    a nested call that sees only modules its launch patched skips, one that sees another module patches it."""
    from triton.runtime import interpreter as triton_interpreter

    for name, source in _NESTED.items():
        (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    kernel = importlib.import_module("nested_kernel").kernel
    original = getattr(triton_interpreter._patch_lang, "__wrapped__", triton_interpreter._patch_lang)
    calls = []

    def counting(fn):
        calls.append(fn.__name__)
        return original(fn)

    monkeypatch.setattr(triton_interpreter, "_patch_lang", counting)
    x = torch.arange(37, dtype=torch.int32)

    def launch():
        calls.clear()
        out = torch.zeros_like(x)
        kernel[(3,)](x, out, x.numel(), BLOCK=16)
        return out

    want = launch()
    assert torch.equal(want, x * 2) and calls.count("twice") == 3 * 4 and calls.count("low") == 3, calls
    assert skip_repeated_language_patches()  # wraps the counter
    for _ in range(2):
        assert torch.equal(launch(), want)
        assert calls == ["kernel", "low"], calls
    assert not skip_repeated_language_patches()  # already installed: nothing to do


def test_the_adapter_takes_device_and_backend(monkeypatch):
    for var in ("DSPARK_DEVICE", "DSPARK_BACKEND"):
        monkeypatch.delenv(var, raising=False)
    default = ReferenceAdapter()
    assert (default.device, default.backend) == ("cpu", "torch") and VERIFY_FLOAT64 in default.capabilities
    monkeypatch.setenv("DSPARK_BACKEND", "Triton")
    if os.environ.get("TRITON_INTERPRET") == "1":
        assert ReferenceAdapter().backend == "triton"  # the env twin
    assert ReferenceAdapter(backend="torch").backend == "torch"  # an argument beats the environment
    with pytest.raises(ValueError, match="^device: expected one of cpu, cuda, got 'gpu'$"):
        ReferenceAdapter(device="gpu")
    monkeypatch.setenv("DSPARK_BACKEND", "fast")
    with pytest.raises(ValueError, match="^DSPARK_BACKEND: expected one of torch, triton, auto, got 'fast'$"):
        ReferenceAdapter()


# --- fp32 engines and verify.float64 -------------------------------------------------------------------------


def _narrow(t):
    return t.to(torch.float32) if isinstance(t, torch.Tensor) and t.dtype == torch.float64 else t


class Float32Reference(ReferenceAdapter):
    """The reference verify ops as an fp32 engine runs them: float64 inputs narrowed to float32 first."""

    name = "reference-fp32"
    capabilities = ReferenceAdapter.capabilities - {VERIFY_FLOAT64}

    @staticmethod
    def _fp32(inputs):
        return type(inputs)(**{f.name: _narrow(getattr(inputs, f.name)) for f in dataclasses.fields(inputs)})

    def greedy_accept(self, inputs):
        return super().greedy_accept(self._fp32(inputs))

    def sampling_accept(self, inputs):
        return super().sampling_accept(self._fp32(inputs))

    def mixed_accept(self, inputs):
        return super().mixed_accept(self._fp32(inputs))

    def sample_block(self, inputs, seed):
        return super().sample_block(self._fp32(inputs), seed)

    def accept_distributions(self, inputs):
        return super().accept_distributions(self._fp32(inputs))


NEEDS_FLOAT64 = sorted(cid for cid in VERIFY_LEVEL if VERIFY_FLOAT64 in CONTRACTS[cid].requires)


def test_exactly_the_exact_law_contracts_need_float64():
    assert NEEDS_FLOAT64 == ["LOSSLESS-001", "LOSSLESS-002"]


@pytest.mark.nightly  # the whole verify level again at full budget (about 3 s): nightly depth, not the default run
@pytest.mark.parametrize("contract_id", VERIFY_LEVEL)
def test_an_fp32_engine_is_held_to_every_law_its_arithmetic_allows(contract_id):
    contract, engine = CONTRACTS[contract_id], Float32Reference()
    if contract_id in NEEDS_FLOAT64:
        with pytest.raises(pytest.skip.Exception, match="lacks capability verify.float64"):
            run_contract(contract, engine, profile="ci")
    elif not contract.requires <= engine.capabilities:
        pytest.skip(f"{contract_id} needs {sorted(contract.requires - engine.capabilities)}")  # not float64's doing
    else:
        run_contract(contract, engine, profile="ci")


def test_logits_float32_cannot_tell_apart_are_ties_for_an_fp32_engine():
    """Near-uniform logits, two of them closer than float32 rounding: an fp32 engine's argmax takes the lower index
    of the two, and the greedy oracle must call that a tie, not the float64 winner (a false alarm before)."""
    case = VerifyCase(bs=2, gamma=5, vocab=42, target_family="near_uniform", draft_family="sparse",
                      draft_mode="target_argmax", seed=835206834)
    logits = build(case).target_logits
    assert not torch.equal(oracle.lowest_argmax(logits), oracle.lowest_argmax(logits.float())), "the premise"
    for cid in ("VERIFY-003", "VERIFY-001"):
        CONTRACTS[cid].check(Float32Reference(), case)


def test_without_the_tag_an_fp32_engine_fails_the_exact_laws():
    """The tag is needed, not decoration: an fp32 engine that claimed float64 fails LOSSLESS-001 (its coin
    thresholds and laws are float32-rounded, far above the 1e-9 tolerance)."""

    class Claims64(Float32Reference):
        capabilities = ReferenceAdapter.capabilities

    with pytest.raises(ContractViolation, match="LOSSLESS-001"):
        run_contract(CONTRACTS["LOSSLESS-001"], Claims64(), profile="ci")


# --- the whole check --------------------------------------------------------------------------------------------


@pytest.mark.triton
@interpreter
def test_check_with_the_triton_backend_passes(tmp_path):
    """`dspark-contracts check --backend triton`, as a user runs it (about 90 s on 2 cores)."""
    out = tmp_path / "triton.json"
    p = run_python("-m", "contracts.cli", "check", "--backend", "triton", "--json", str(out), timeout=1200)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr
    data = json.loads(out.read_text())
    assert (data["engine_device"], data["engine_backend"]) == ("cpu", "triton")
    assert "device=cpu, backend=triton (Triton interpreter)" in p.stdout
    rows = {r["id"]: r["result"] for r in data["contracts"]}
    assert all(rows[cid] == "passed" for cid in VERIFY_LEVEL if set(CONTRACTS[cid].requires) <= set(data["capabilities"]))
    assert data["counts"]["failed"] == 0
