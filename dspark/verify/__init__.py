"""Verify/accept ops of the reference engine (greedy, chain rejection sampling, mixed, finalize).

Each op has a torch reference (``reference.py``, the specification) and a
Triton kernel (``triton_kernels.py``, imported lazily) with the same
signature; the functions exported here validate their arguments and pick one
(``backend="auto" | "torch" | "triton"``). The independent float64 laws the
contracts compare against live in ``contracts/oracle.py``.
"""

from .dispatch import finalize, greedy_accept, mixed_accept, sampling_accept, triton_runs_on_cpu
from .noise import draw_coins, draw_resample_noise
from .results import AcceptOut, Finalized

__all__ = [
    "AcceptOut",
    "Finalized",
    "draw_coins",
    "draw_resample_noise",
    "finalize",
    "greedy_accept",
    "mixed_accept",
    "sampling_accept",
    "triton_runs_on_cpu",
]
