"""Argument checks for the verify ops, run before any kernel launches.

Every error names the offending argument first (``"coins: ..."``). Wrong kinds
of dtype raise TypeError; wrong shapes, devices and values raise ValueError.
Checks that read tensor contents (token ranges, probability rows, coins) cost a
device sync and a few passes over the data, so callers can skip them with
``values=False``; the dispatcher also skips them while a CUDA graph is being
captured, where a sync is illegal. Shape, dtype and device checks always run.
"""

from __future__ import annotations

import torch

from .results import AcceptOut

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)

# How far a probability row's sum may stray from 1: roughly the rounding a
# softmax written in that dtype accumulates over a 150k-token vocabulary.
PROB_SUM_ATOL = {
    torch.float64: 1e-6,
    torch.float32: 1e-3,
    torch.float16: 1e-2,
    torch.bfloat16: 2e-2,
}


def _tensor(name: str, value) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    return value


def _shape(name: str, t: torch.Tensor, expected: tuple) -> None:
    """``expected`` holds ints or None (any size) per dim."""
    ok = t.dim() == len(expected) and all(e is None or s == e for s, e in zip(t.shape, expected))
    if not ok:
        want = "[" + ", ".join("*" if e is None else str(e) for e in expected) + "]"
        raise ValueError(f"{name}: expected shape {want}, got {list(t.shape)}")


def integer(name: str, value, expected_shape: tuple) -> torch.Tensor:
    t = _tensor(name, value)
    if t.dtype not in INT_DTYPES:
        raise TypeError(f"{name}: expected an integer dtype, got {t.dtype}")
    _shape(name, t, expected_shape)
    return t


def floating(name: str, value, expected_shape: tuple) -> torch.Tensor:
    t = _tensor(name, value)
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name}: expected one of float16/bfloat16/float32/float64, got {t.dtype}")
    _shape(name, t, expected_shape)
    return t


def boolean(name: str, value, expected_shape: tuple) -> torch.Tensor:
    t = _tensor(name, value)
    if t.dtype != torch.bool:
        raise TypeError(f"{name}: expected torch.bool, got {t.dtype}")
    _shape(name, t, expected_shape)
    return t


def same_device(**tensors) -> torch.device:
    named = [(n, t) for n, t in tensors.items() if t is not None]
    device = named[0][1].device
    for n, t in named[1:]:
        if t.device != device:
            raise ValueError(f"{n}: on {t.device}, but {named[0][0]} is on {device}")
    return device


def check_backend(backend) -> str:
    if backend not in ("auto", "torch", "triton"):
        raise ValueError(f"backend: expected 'auto', 'torch' or 'triton', got {backend!r}")
    return backend


# --- value checks (read tensor contents) ------------------------------------


def token_range(name: str, t: torch.Tensor, vocab: int) -> None:
    if t.numel() == 0:
        return
    lo, hi = int(t.min()), int(t.max())
    if lo < 0 or hi >= vocab:
        raise ValueError(f"{name}: token ids must lie in [0, {vocab}), got range [{lo}, {hi}]")


def verify_lens_range(name: str, t: torch.Tensor, width: int) -> None:
    if t.numel() == 0:
        return
    lo, hi = int(t.min()), int(t.max())
    if lo < 1 or hi > width:
        raise ValueError(f"{name}: must lie in [1, gamma+1] = [1, {width}], got range [{lo}, {hi}]")


def probability_rows(name: str, t: torch.Tensor, live: torch.Tensor | None) -> None:
    """Rows ``t[b, j, :]`` with ``live[b, j]`` must be finite, >= 0 and sum to 1.

    Rows the op never reads (past a request's verify length, or requests a
    mixed batch verifies greedily) may hold anything.
    """
    if t.numel() == 0:
        return
    low = t.amin(-1)  # amin propagates NaN, so one pass finds NaN and negatives
    total = t.sum(-1, dtype=torch.float64)
    atol = PROB_SUM_ATOL[t.dtype]
    bad_value = torch.isnan(low) | (low < 0)
    bad_sum = ~((total - 1.0).abs() <= atol)  # also true for inf / NaN sums
    if live is not None:
        bad_value &= live
        bad_sum &= live
    if bool(bad_value.any()):
        b, j = (int(i) for i in bad_value.nonzero()[0])
        raise ValueError(f"{name}: row [{b}, {j}] holds a NaN or negative probability (min {float(low[b, j])})")
    if bool(bad_sum.any()):
        b, j = (int(i) for i in bad_sum.nonzero()[0])
        raise ValueError(f"{name}: row [{b}, {j}] sums to {float(total[b, j])}, expected 1 within {atol}")


def unit_interval(name: str, t: torch.Tensor) -> None:
    if t.numel() == 0:
        return
    ok = (t >= 0) & (t < 1)  # False for NaN
    if not bool(ok.all()):
        bad = t[~ok][0]
        raise ValueError(f"{name}: values must lie in [0, 1), found {float(bad)}")


def positive_finite(name: str, t: torch.Tensor) -> None:
    if t.numel() == 0:
        return
    ok = torch.isfinite(t) & (t > 0)
    if not bool(ok.all()):
        bad = t[~ok][0]
        raise ValueError(f"{name}: values must be finite and > 0, found {float(bad)}")


# --- per-op argument sets ----------------------------------------------------


def candidates_shape(candidates) -> tuple[int, int]:
    c = integer("candidates", candidates, (None, None))
    bs, width = c.shape
    if width < 2:
        raise ValueError(f"candidates: need an anchor and at least one draft (gamma >= 1), got shape {list(c.shape)}")
    return bs, width


def live_rows(verify_lens, greedy_mask, bs: int, rows: int, device) -> torch.Tensor | None:
    """Which probability rows an op reads: j < verify_len, on sampled requests."""
    if verify_lens is None and greedy_mask is None:
        return None
    live = torch.ones(bs, rows, dtype=torch.bool, device=device)
    if verify_lens is not None:
        live &= torch.arange(rows, device=device)[None, :] < verify_lens[:, None]
    if greedy_mask is not None:
        live &= ~greedy_mask[:, None]
    return live


def greedy_args(candidates, target_logits, verify_lens, *, values: bool) -> None:
    bs, width = candidates_shape(candidates)
    logits = floating("target_logits", target_logits, (bs, width, None))
    vocab = logits.shape[-1]
    if vocab < 1:
        raise ValueError("target_logits: vocabulary dimension is empty")
    if verify_lens is not None:
        integer("verify_lens", verify_lens, (bs,))
    same_device(candidates=candidates, target_logits=target_logits, verify_lens=verify_lens)
    if values:
        token_range("candidates", candidates, vocab)
        if verify_lens is not None:
            verify_lens_range("verify_lens", verify_lens, width)


def sampling_args(candidates, target_probs, draft_probs, coins, resample_noise, verify_lens,
                  greedy_mask=None, *, values: bool) -> None:
    bs, width = candidates_shape(candidates)
    gamma = width - 1
    p = floating("target_probs", target_probs, (bs, width, None))
    vocab = p.shape[-1]
    if vocab < 1:
        raise ValueError("target_probs: vocabulary dimension is empty")
    if draft_probs is not None:
        floating("draft_probs", draft_probs, (bs, gamma, vocab))
    floating("coins", coins, (bs, gamma))
    floating("resample_noise", resample_noise, (bs, vocab))
    if verify_lens is not None:
        integer("verify_lens", verify_lens, (bs,))
    same_device(candidates=candidates, target_probs=target_probs, draft_probs=draft_probs, coins=coins,
                resample_noise=resample_noise, verify_lens=verify_lens, greedy_mask=greedy_mask)
    if not values:
        return
    token_range("candidates", candidates, vocab)
    if verify_lens is not None:
        verify_lens_range("verify_lens", verify_lens, width)
    live = live_rows(verify_lens, greedy_mask, bs, width, candidates.device)
    probability_rows("target_probs", target_probs, live)
    if draft_probs is not None:
        probability_rows("draft_probs", draft_probs, None if live is None else live[:, :gamma])
    unit_interval("coins", coins)
    positive_finite("resample_noise", resample_noise)


def mixed_args(candidates, target_logits, target_probs, draft_probs, coins, resample_noise, greedy_mask,
               verify_lens, *, values: bool) -> None:
    bs, _ = candidates_shape(candidates)
    boolean("greedy_mask", greedy_mask, (bs,))
    # Shapes of both halves first, so a shape error never waits on a value scan.
    greedy_args(candidates, target_logits, verify_lens, values=False)
    sampling_args(candidates, target_probs, draft_probs, coins, resample_noise, verify_lens, greedy_mask,
                  values=False)
    if target_logits.shape[-1] != target_probs.shape[-1]:
        raise ValueError(f"target_probs: vocabulary {target_probs.shape[-1]} differs from "
                         f"target_logits' {target_logits.shape[-1]}")
    if values:
        greedy_args(candidates, target_logits, verify_lens, values=True)
        sampling_args(candidates, target_probs, draft_probs, coins, resample_noise, verify_lens, greedy_mask,
                      values=True)


def finalize_args(prefix_lens, drafts, accept, *, values: bool) -> None:
    p = integer("prefix_lens", prefix_lens, (None,))
    bs = p.shape[0]
    d = integer("drafts", drafts, (bs, None))
    gamma = d.shape[1]
    if not isinstance(accept, AcceptOut):
        raise TypeError(f"accept: expected AcceptOut, got {type(accept).__name__}")
    integer("accept.correct_len", accept.correct_len, (bs,))
    integer("accept.bonus", accept.bonus, (bs,))
    integer("accept.cap_trim", accept.cap_trim, (bs,))
    same_device(prefix_lens=prefix_lens, drafts=drafts, **{"accept.correct_len": accept.correct_len,
                                                            "accept.bonus": accept.bonus})
    if values:
        if p.numel() and int(p.min()) < 0:
            raise ValueError(f"prefix_lens: must be >= 0, got min {int(p.min())}")
        c = accept.correct_len
        if c.numel() and (int(c.min()) < 0 or int(c.max()) > gamma):
            raise ValueError(f"accept.correct_len: must lie in [0, gamma] = [0, {gamma}], "
                             f"got range [{int(c.min())}, {int(c.max())}]")
