"""Where the reference engine's verify level runs: its backends and Triton's two modes.

`auto` is SGLang's rule: Triton on CUDA, torch on the CPU. Triton fixes interpreted or compiled when a kernel
module is imported, so TRITON_INTERPRET must agree with the device before `dspark.verify.triton_kernels` loads:
interpreted (1) on the CPU, compiled (unset) on CUDA.
"""

from __future__ import annotations

import importlib.util
import os
import sys

from contracts.triton_interpreter import skip_dead_work

BACKENDS = ("torch", "triton", "auto")
_KERNELS = "dspark.verify.triton_kernels"


def resolve_backend(device: str, requested: str, flag: str) -> str:
    """The backend `requested` resolves to on `device`, checked against this machine (ValueError naming `flag`)."""
    has_triton = importlib.util.find_spec("triton") is not None
    resolved = requested if requested != "auto" else ("triton" if device == "cuda" and has_triton else "torch")
    if resolved != "triton":
        return resolved
    if not has_triton:
        raise ValueError(f"{flag}: 'triton' needs the triton package, which is not installed")
    interpret = os.environ.get("TRITON_INTERPRET", "")
    if device == "cpu":
        if importlib.util.find_spec("numpy") is None:
            raise ValueError(f"{flag}: 'triton' on cpu runs the Triton interpreter, which needs numpy")
        if interpret not in ("", "1"):
            raise ValueError(f"{flag}: 'triton' on cpu runs the Triton interpreter, but "
                             f"TRITON_INTERPRET={interpret!r}; unset it or set it to 1")
    elif interpret == "1":
        what = "'triton'" if requested == "triton" else "'auto' (triton)"
        raise ValueError(f"{flag}: {what} on cuda runs compiled kernels, but TRITON_INTERPRET=1 is set "
                         "(they would be interpreted); unset it")
    return resolved


def placement_env(where) -> dict:
    """TRITON_INTERPRET=1 for interpreted kernels when it is unset or empty (`resolve_backend` refused any other
    value), so xdist workers and rank processes import the kernels the same way."""
    return {"TRITON_INTERPRET": "1"} if where.interpreted and not os.environ.get("TRITON_INTERPRET") else {}


def load_kernels(device: str) -> None:
    """Import the Triton kernels as the device needs them: interpreted on the CPU, compiled on CUDA. A module
    imported the other way is refused, not used."""
    if device == "cpu" and _KERNELS not in sys.modules and not os.environ.get("TRITON_INTERPRET"):
        os.environ["TRITON_INTERPRET"] = "1"  # unset or empty; resolve_backend refused any other explicit value
    from dspark.verify import triton_kernels

    skip_dead_work()

    if triton_kernels.INTERPRETED != (device == "cpu"):
        want = "interpreted (TRITON_INTERPRET=1)" if device == "cpu" else "compiled (TRITON_INTERPRET unset)"
        raise ValueError(f"backend: 'triton' on {device} needs the kernels {want}, but {_KERNELS} was already "
                         "imported the other way in this process")
