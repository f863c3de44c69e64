"""Input checks shared by the reference engine's public functions.

Every check names the offending field and runs before anything is written, so
a rejected call leaves all state untouched.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def int_tensor(name: str, value, *, ndim: int = 1, nonnegative: bool = False) -> torch.Tensor:
    """Return `value` if it is an integer tensor of `ndim` dims, else raise naming `name`."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if value.dtype not in _INT_DTYPES:
        raise TypeError(f"{name}: expected an integer dtype, got {value.dtype}")
    if value.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim}-D, got shape {tuple(value.shape)}")
    if nonnegative and value.numel() and int(value.min()) < 0:
        raise ValueError(f"{name}: must be non-negative, got min {int(value.min())}")
    return value


def shape_of(value):
    """What an error reports for a value that should have been a tensor of some shape: its shape, or its type."""
    return list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__


def matrix(name: str, value, rows: int | None = None) -> torch.Tensor:
    """Return `value` if it is a 2-D tensor (with `rows` rows when given: one per request), else raise naming `name`."""
    if not isinstance(value, torch.Tensor) or value.dim() != 2 or (rows is not None and value.shape[0] != rows):
        raise ValueError(f"{name}: expected a [{'n' if rows is None else rows}, gamma] tensor, got {shape_of(value)}")
    return value


def same_length(**tensors: torch.Tensor) -> int:
    """Check that all given 1-D tensors have one length and return it."""
    lengths = {name: int(t.shape[0]) for name, t in tensors.items()}
    if len(set(lengths.values())) > 1:
        detail = ", ".join(f"{n}={v}" for n, v in lengths.items())
        raise ValueError(f"length mismatch: {detail}")
    return next(iter(lengths.values()), 0)


def in_range(name: str, t: torch.Tensor, low: int, high: int) -> None:
    """Check low <= t < high elementwise."""
    if not t.numel():
        return
    lo, hi = (int(x) for x in torch.aminmax(t))
    if lo < low or hi >= high:
        raise ValueError(f"{name}: values must lie in [{low}, {high}), got [{lo}, {hi}]")


def probabilities(name: str, t: torch.Tensor) -> None:
    """Check every entry lies in [0, 1] (NaN fails)."""
    if t.numel():
        lo, hi = (float(x) for x in torch.aminmax(t))
        if not 0.0 <= lo <= hi <= 1.0:  # a NaN makes the chain false
            raise ValueError(f"{name}: values must lie in [0, 1], got [{lo}, {hi}]")


def unique(name: str, t: torch.Tensor) -> None:
    """Check the entries of a 1-D tensor are distinct: on the host, since torch.unique pays a sort for a few rows."""
    values = t.tolist()
    if len(set(values)) != len(values):
        raise ValueError(f"{name}: entries must be distinct, got {values}")


def integer(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected int, got {type(value).__name__}")
    return value


def nonnegative_int(name: str, value) -> int:
    if integer(name, value) < 0:
        raise ValueError(f"{name}: must be >= 0, got {value}")
    return value


def finite(name: str, value) -> float:
    """A real number (int or float, not bool) that is finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name}: must be finite, got {value}")
    return value


def flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected True or False, got {value!r}")
    return value


def listed(name: str, value) -> list:
    """A finite sequence of items (a generator is read once, here, not half-consumed by a check)."""
    if isinstance(value, (str, bytes, torch.Tensor)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name}: expected a list, got {type(value).__name__}")
    return list(value)


def device(name: str, value) -> torch.device:
    try:
        return torch.device(value)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"{name}: not a torch device: {value!r}") from e


def positive_int(name: str, value) -> int:
    if integer(name, value) < 1:
        raise ValueError(f"{name}: must be >= 1, got {value}")
    return value


def count_list(name: str, counts, *, length: int | None = None) -> list[int]:
    """Per-DP-rank counts: a list of non-negative ints (optionally of a given length)."""
    if not isinstance(counts, (list, tuple)):
        raise TypeError(f"{name}: expected a list of ints, got {type(counts).__name__}")
    for c in counts:
        if isinstance(c, bool) or not isinstance(c, int):
            raise TypeError(f"{name}: expected ints, got {type(c).__name__}")
        if c < 0:
            raise ValueError(f"{name}: counts must be non-negative, got {list(counts)}")
    if length is not None and len(counts) != length:
        raise ValueError(f"{name}: expected {length} per-rank entries, got {len(counts)}")
    return list(counts)


def same_ranks(**lists: Sequence[int] | None) -> None:
    present = {n: len(v) for n, v in lists.items() if v is not None}
    if len(set(present.values())) > 1:
        detail = ", ".join(f"{n}={v}" for n, v in present.items())
        raise ValueError(f"DP count lists differ in length: {detail}")
