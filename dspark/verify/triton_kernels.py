"""Triton kernels of the verify ops, with the torch reference's signatures.

Import this module only through ``dspark.verify.dispatch`` (lazily): whether
``triton.jit`` builds compiled or interpreted kernels is decided when this
module is first imported, from ``TRITON_INTERPRET``. To run these kernels on
CPU tensors, set ``TRITON_INTERPRET=1`` before that first import.

Exactness: each float step below is one IEEE-rounded operation in the same
order as ``reference.py`` (widen, subtract, clamp, multiply, compare), with no
sums or scans, so results match the torch reference bit for bit. Ties and NaN
follow ``reference.py``: lowest index wins a tie, a NaN beats every number.

Layout per op: one launch computes per-row argmaxes (``bs*T`` rows, a loop over
vocabulary tiles, so V = 129280 or 151936 fits the 2**20-element block limit);
a second tiny launch turns them into lengths and bonus. The sampling op is one
launch: gathers for the accept test, then a tiled exponential-race draw from
the one residual row each request needs. Offsets are built in int64.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .reference import compute_dtype
from .results import AcceptOut, Finalized

# Fixed when this module is imported, exactly like triton.jit's own choice.
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"

_NO_INDEX = 2147483647  # int32 max: "no column found" in min-reductions

# Vocabulary tile widths. The interpreter costs per numpy op, not per element,
# yet its tile is narrow so that small vocabularies cross tile boundaries: the
# contracts' vocabularies (2..64) then exercise the tiled loops (ties and the
# residual draw across tiles) when `dspark-contracts check --backend triton`
# runs them in the interpreter; production vocabularies cross GPU tiles.
_GPU_ARGMAX_TILE, _GPU_SAMPLE_TILE = 4096, 2048
_CPU_TILE = 16


def vocab_tile(op: str, device: torch.device | str) -> int:
    """Vocabulary tile width the kernel for ``op`` ('greedy' | 'sampling') uses on ``device``."""
    if torch.device(device).type != "cuda":
        return _CPU_TILE
    return {"greedy": _GPU_ARGMAX_TILE, "sampling": _GPU_SAMPLE_TILE}[op]


def _rows_per_program(device: torch.device, n_rows: int, gpu_rows: int) -> int:
    """Rows per program: few on GPU (parallelism), many in the interpreter (it costs per program)."""
    if device.type == "cuda":
        return gpu_rows
    return min(triton.next_power_of_2(max(n_rows, 1)), 64)


def _tl_acc(dtype: torch.dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


@triton.jit
def _row_argmax_kernel(x_ptr, out_ptr, n_rows, V,
                       ACC: tl.constexpr, ROWS: tl.constexpr, BLOCK_V: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid.to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    row_ok = rows < n_rows
    base = rows * V
    lanes = tl.arange(0, BLOCK_V)
    best_val = tl.full([ROWS], float("-inf"), ACC)
    best_idx = tl.full([ROWS], -1, tl.int32)  # -1: nothing seen yet
    nan_idx = tl.full([ROWS], 2147483647, tl.int32)
    for start in range(0, V, BLOCK_V):
        cols = start + lanes
        ok = row_ok[:, None] & (cols[None, :] < V)
        x = tl.load(x_ptr + base[:, None] + cols[None, :], mask=ok, other=float("-inf")).to(ACC)
        is_nan = x != x
        nan_idx = tl.minimum(nan_idx, tl.min(tl.where(is_nan & ok, cols[None, :], 2147483647), axis=1))
        x = tl.where(is_nan, float("-inf"), x)
        tile_max = tl.max(x, axis=1)
        # Lowest column holding the tile maximum, found by a min over indices
        # rather than trusting any reduction order.
        tile_idx = tl.min(tl.where(ok & (x == tile_max[:, None]), cols[None, :], 2147483647), axis=1)
        # Strictly greater: an equal maximum in a later tile never displaces an earlier one.
        take = (tile_max > best_val) | (best_idx < 0)
        best_val = tl.where(take, tile_max, best_val)
        best_idx = tl.where(take, tile_idx, best_idx)
    result = tl.where(nan_idx < 2147483647, nan_idx, best_idx)
    tl.store(out_ptr + rows, result.to(tl.int64), mask=row_ok)


@triton.jit
def _greedy_tail_kernel(cand_ptr, pred_ptr, vl_ptr, correct_ptr, bonus_ptr, trim_ptr, bs, T,
                        HAS_VL: tl.constexpr, ROWS: tl.constexpr, BLOCK_T: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid.to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    row_ok = rows < bs
    gamma = T - 1
    j = tl.arange(0, BLOCK_T)
    live = row_ok[:, None] & (j[None, :] < gamma)
    d = tl.load(cand_ptr + rows[:, None] * T + 1 + j[None, :], mask=live, other=0)
    t = tl.load(pred_ptr + rows[:, None] * T + j[None, :], mask=live, other=0)
    # First mismatch = number of leading matches.
    raw = tl.min(tl.where(live & (d != t), j[None, :], gamma), axis=1)
    capped = raw
    if HAS_VL:
        vl = tl.load(vl_ptr + rows, mask=row_ok, other=1).to(tl.int32)
        capped = tl.minimum(raw, vl - 1)
    bonus = tl.load(pred_ptr + rows * T + capped, mask=row_ok, other=0)
    tl.store(correct_ptr + rows, capped.to(tl.int32), mask=row_ok)
    tl.store(trim_ptr + rows, (raw - capped).to(tl.int32), mask=row_ok)
    tl.store(bonus_ptr + rows, bonus.to(tl.int64), mask=row_ok)


@triton.jit
def _chain_sample_kernel(cand_ptr, p_ptr, q_ptr, u_ptr, w_ptr, vl_ptr, correct_ptr, bonus_ptr, trim_ptr,
                         bs, T, V, HAS_Q: tl.constexpr, HAS_VL: tl.constexpr, ACC: tl.constexpr,
                         ROWS: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_V: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid.to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    row_ok = rows < bs
    gamma = T - 1
    j = tl.arange(0, BLOCK_T)
    live = row_ok[:, None] & (j[None, :] < gamma)

    # Accept test on gathered probabilities: u * q(d) < p(d), and q(d) > 0.
    d = tl.load(cand_ptr + rows[:, None] * T + 1 + j[None, :], mask=live, other=0)
    p_d = tl.load(p_ptr + (rows[:, None] * T + j[None, :]) * V + d, mask=live, other=0.0).to(ACC)
    if HAS_Q:
        q_d = tl.load(q_ptr + (rows[:, None] * gamma + j[None, :]) * V + d, mask=live, other=0.0).to(ACC)
    else:
        q_d = tl.full([ROWS, BLOCK_T], 1.0, ACC)
    u = tl.load(u_ptr + rows[:, None] * gamma + j[None, :], mask=live, other=1.0).to(ACC)
    accepted = (q_d > 0) & (u * q_d < p_d)
    raw = tl.min(tl.where(live & (accepted == 0), j[None, :], gamma), axis=1)
    capped = raw
    if HAS_VL:
        vl = tl.load(vl_ptr + rows, mask=row_ok, other=1).to(tl.int32)
        capped = tl.minimum(raw, vl - 1)

    # Draw only where the bonus is not an already accepted draft.
    draw = row_ok & (capped == raw)
    has_q_row = raw < gamma
    p_row = (rows * T + raw) * V
    q_row = (rows * gamma + raw) * V
    next_draft = tl.load(cand_ptr + rows * T + 1 + raw, mask=draw & has_q_row, other=-1)
    lanes = tl.arange(0, BLOCK_V)
    best_r = tl.full([ROWS], -1.0, ACC)  # scores are >= 0, so any real column beats -1
    idx_r = tl.full([ROWS], 0, tl.int32)
    best_p = tl.full([ROWS], -1.0, ACC)
    idx_p = tl.full([ROWS], 0, tl.int32)
    any_mass = tl.full([ROWS], 0, tl.int32)
    for start in range(0, V, BLOCK_V):
        cols = start + lanes
        ok = draw[:, None] & (cols[None, :] < V)
        p = tl.load(p_ptr + p_row[:, None] + cols[None, :], mask=ok, other=0.0).to(ACC)
        if HAS_Q:
            q = tl.load(q_ptr + q_row[:, None] + cols[None, :], mask=ok & has_q_row[:, None], other=0.0).to(ACC)
        else:
            q = tl.where(cols[None, :] == next_draft[:, None], 1.0, 0.0).to(ACC)
        w = tl.load(w_ptr + rows[:, None] * V + cols[None, :], mask=ok, other=0.0).to(ACC)
        residual = tl.maximum(p - q, 0.0)
        any_mass = tl.maximum(any_mass, tl.max((ok & (residual > 0)).to(tl.int32), axis=1))
        s_r = tl.where(ok, residual * w, -1.0)
        s_p = tl.where(ok, p * w, -1.0)
        m_r = tl.max(s_r, axis=1)
        m_p = tl.max(s_p, axis=1)
        i_r = tl.min(tl.where(s_r == m_r[:, None], cols[None, :], 2147483647), axis=1)
        i_p = tl.min(tl.where(s_p == m_p[:, None], cols[None, :], 2147483647), axis=1)
        take_r = m_r > best_r
        take_p = m_p > best_p
        best_r = tl.where(take_r, m_r, best_r)
        idx_r = tl.where(take_r, i_r, idx_r)
        best_p = tl.where(take_p, m_p, best_p)
        idx_p = tl.where(take_p, i_p, idx_p)
    drawn = tl.where(any_mass > 0, idx_r, idx_p).to(tl.int64)
    carried = tl.load(cand_ptr + rows * T + 1 + capped, mask=row_ok & (capped < raw), other=0)
    bonus = tl.where(capped < raw, carried, drawn)
    tl.store(correct_ptr + rows, capped.to(tl.int32), mask=row_ok)
    tl.store(trim_ptr + rows, (raw - capped).to(tl.int32), mask=row_ok)
    tl.store(bonus_ptr + rows, bonus.to(tl.int64), mask=row_ok)


@triton.jit
def _finalize_kernel(prefix_ptr, drafts_ptr, correct_ptr, bonus_ptr, commit_ptr, seq_ptr, out_ptr, bs, gamma,
                     ROWS: tl.constexpr, BLOCK_T: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid.to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    row_ok = rows < bs
    slot = tl.arange(0, BLOCK_T)
    correct = tl.load(correct_ptr + rows, mask=row_ok, other=0).to(tl.int32)
    bonus = tl.load(bonus_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    d = tl.load(drafts_ptr + rows[:, None] * gamma + slot[None, :],
                mask=row_ok[:, None] & (slot[None, :] < correct[:, None]), other=0).to(tl.int64)
    out = tl.where(slot[None, :] < correct[:, None], d, tl.where(slot[None, :] == correct[:, None], bonus[:, None], -1))
    tl.store(out_ptr + rows[:, None] * (gamma + 1) + slot[None, :], out,
             mask=row_ok[:, None] & (slot[None, :] <= gamma))
    commit = correct + 1
    prefix = tl.load(prefix_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    tl.store(commit_ptr + rows, commit, mask=row_ok)
    tl.store(seq_ptr + rows, prefix + commit.to(tl.int64), mask=row_ok)


def _empty_accept(bs: int, device) -> AcceptOut:
    return AcceptOut(torch.empty(bs, dtype=torch.int32, device=device),
                     torch.empty(bs, dtype=torch.int64, device=device),
                     torch.empty(bs, dtype=torch.int32, device=device))


def _block_t(n: int) -> int:
    return max(2, triton.next_power_of_2(n))


def greedy_accept(candidates: torch.Tensor, target_logits: torch.Tensor,
                  verify_lens: torch.Tensor | None = None) -> AcceptOut:
    bs, width = candidates.shape
    vocab = target_logits.shape[-1]
    device = candidates.device
    out = _empty_accept(bs, device)
    if bs == 0:
        return out
    cand = candidates.to(torch.int64).contiguous()
    logits = target_logits.contiguous()
    pred = torch.empty(bs, width, dtype=torch.int64, device=device)
    n_rows = bs * width
    tile = vocab_tile("greedy", device)
    block_v = min(tile, triton.next_power_of_2(vocab))
    rows = _rows_per_program(device, n_rows, gpu_rows=1)
    _row_argmax_kernel[(triton.cdiv(n_rows, rows),)](
        logits, pred, n_rows, vocab, ACC=_tl_acc(logits.dtype), ROWS=rows, BLOCK_V=block_v, num_warps=8)
    vl = cand if verify_lens is None else verify_lens.to(torch.int64).contiguous()
    tail_rows = 128 if device.type == "cuda" else min(1024, triton.next_power_of_2(bs))
    _greedy_tail_kernel[(triton.cdiv(bs, tail_rows),)](
        cand, pred, vl, out.correct_len, out.bonus, out.cap_trim, bs, width,
        HAS_VL=verify_lens is not None, ROWS=tail_rows, BLOCK_T=_block_t(width - 1), num_warps=4)
    return out


def sampling_accept(candidates: torch.Tensor, target_probs: torch.Tensor, draft_probs: torch.Tensor | None,
                    coins: torch.Tensor, resample_noise: torch.Tensor,
                    verify_lens: torch.Tensor | None = None) -> AcceptOut:
    bs, width = candidates.shape
    vocab = target_probs.shape[-1]
    device = candidates.device
    out = _empty_accept(bs, device)
    if bs == 0:
        return out
    acc = compute_dtype(target_probs, draft_probs)
    cand = candidates.to(torch.int64).contiguous()
    p = target_probs.contiguous()
    q = p if draft_probs is None else draft_probs.contiguous()
    u = coins.to(acc).contiguous()
    w = resample_noise.to(acc).contiguous()
    vl = cand if verify_lens is None else verify_lens.to(torch.int64).contiguous()
    tile = vocab_tile("sampling", device)
    block_v = min(tile, triton.next_power_of_2(vocab))
    rows = _rows_per_program(device, bs, gpu_rows=1)
    _chain_sample_kernel[(triton.cdiv(bs, rows),)](
        cand, p, q, u, w, vl, out.correct_len, out.bonus, out.cap_trim, bs, width, vocab,
        HAS_Q=draft_probs is not None, HAS_VL=verify_lens is not None, ACC=_tl_acc(acc),
        ROWS=rows, BLOCK_T=_block_t(width - 1), BLOCK_V=block_v, num_warps=8)
    return out


def finalize(prefix_lens: torch.Tensor, drafts: torch.Tensor, accept: AcceptOut) -> Finalized:
    bs, gamma = drafts.shape
    device = drafts.device
    commit = torch.empty(bs, dtype=torch.int32, device=device)
    seq = torch.empty(bs, dtype=torch.int64, device=device)
    out_tokens = torch.empty(bs, gamma + 1, dtype=torch.int64, device=device)
    if bs == 0:
        return Finalized(commit, seq, out_tokens)
    rows = 128 if device.type == "cuda" else min(1024, triton.next_power_of_2(bs))
    _finalize_kernel[(triton.cdiv(bs, rows),)](
        prefix_lens.contiguous(), drafts.contiguous(), accept.correct_len.contiguous(), accept.bonus.contiguous(),
        commit, seq, out_tokens, bs, gamma, ROWS=rows, BLOCK_T=_block_t(gamma + 1), num_warps=4)
    return Finalized(commit, seq, out_tokens)
