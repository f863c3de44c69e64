"""Assertion helpers: compare, format, raise a Mismatch with expected vs observed."""

from __future__ import annotations

import torch

from contracts.violation import Mismatch


def fmt(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"{x.tolist()} ({str(x.dtype).replace('torch.', '')}, shape {tuple(x.shape)})"
    return repr(x)


def expect(cond: bool, what: str, expected, observed) -> None:
    __tracebackhide__ = True
    if not cond:
        raise Mismatch(what, expected, observed)


def expect_equal(what: str, expected, observed) -> None:
    """Exact equality; tensors must also agree in dtype and shape."""
    __tracebackhide__ = True
    if isinstance(expected, torch.Tensor) or isinstance(observed, torch.Tensor):
        ok = (
            isinstance(expected, torch.Tensor)
            and isinstance(observed, torch.Tensor)
            and expected.dtype == observed.dtype
            and expected.shape == observed.shape
            and torch.equal(expected.cpu(), observed.cpu())
        )
    else:
        ok = expected == observed
    if not ok:
        raise Mismatch(what, fmt(expected), fmt(observed))


def expect_values(what: str, expected, observed) -> None:
    """Value equality after `tolist()`, ignoring dtype and device."""
    __tracebackhide__ = True
    as_list = lambda v: v.tolist() if isinstance(v, torch.Tensor) else v  # noqa: E731
    if as_list(expected) != as_list(observed):
        raise Mismatch(what, fmt(expected), fmt(observed))


def expect_dtype(what: str, dtype: torch.dtype, observed) -> None:
    __tracebackhide__ = True
    got = observed.dtype if isinstance(observed, torch.Tensor) else type(observed).__name__
    if got != dtype:
        raise Mismatch(f"{what}.dtype", dtype, got)
