"""Torch reference of the verify/accept ops: the specification.

Vectorised over the batch (no per-row Python loops) and written so that every
float operation is a single IEEE-rounded step, which the Triton kernels repeat
in the same order; that is what makes the two bit-identical.

Conventions
-----------
* Layout: ``candidates[:, 0]`` is the anchor, ``candidates[:, 1:]`` the gamma
  drafts; target row ``j`` is the law of the token after ``candidates[:, j]``,
  so draft ``d_{j+1} = candidates[:, j+1]`` is tested against row ``j``.
* Argmax: the largest value wins; ties go to the lowest vocabulary index; a NaN
  ranks above every number (+inf included), so a row holding NaN picks its
  lowest-index NaN. This is ``torch.argmax``'s documented behaviour, pinned by
  tests, and the Triton kernel implements it explicitly.
* Compute dtype: float64 if any probability input is float64, else float32;
  half inputs are widened exactly before any arithmetic.
* Sampling accept: draft ``d`` at row ``j`` is accepted iff ``q(d) > 0`` and
  ``u * q(d) < p(d)``. A proposal the draft gave probability 0 is rejected.
  ``draft_probs=None`` means a one-hot draft on the candidates (``q(d) = 1``).
* Resample noise: per request a row ``w[b, :]`` of inverse exponential weights,
  ``w = 1 / E`` with ``E ~ Exp(1)`` i.i.d. A draw from the (unnormalised)
  weights ``r`` is ``argmax_x r(x) * w(x)`` (the exponential race, the same as
  Gumbel-max on ``log r``; no normalisation, logarithm or division needed).
  One row of noise serves the whole chain because only one draw is ever used.
* Residual: at the first rejected row ``k < gamma`` the bonus is drawn from
  ``max(p_k - q_k, 0)``; when that has no positive entry it falls back to
  ``p_k``. When all gamma drafts pass, it is drawn from ``p_gamma`` (last row).
* Verify cap ``L``: ``capped = min(raw, L - 1)``. If ``capped < raw`` the bonus
  is the already accepted draft ``candidates[:, capped + 1]``, not a new draw.
"""

from __future__ import annotations

import torch

from .results import AcceptOut, Finalized


def compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def _cap(raw: torch.Tensor, verify_lens: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    if verify_lens is None:
        return raw, torch.zeros_like(raw)
    capped = torch.minimum(raw, verify_lens.to(raw.dtype) - 1)
    return capped, raw - capped


def _leading_true(mask: torch.Tensor) -> torch.Tensor:
    """Per row, how many leading entries of ``mask`` [bs, n] are True (int64)."""
    return mask.to(torch.int64).cumprod(dim=1).sum(dim=1)


def greedy_accept(candidates: torch.Tensor, target_logits: torch.Tensor,
                  verify_lens: torch.Tensor | None = None) -> AcceptOut:
    bs, width = candidates.shape
    # The one full pass over [bs, T, V]; everything after it is O(bs * T).
    pred = torch.argmax(target_logits, dim=-1)  # [bs, T] int64
    raw = _leading_true(candidates[:, 1:].to(torch.int64) == pred[:, :-1])
    capped, trim = _cap(raw, verify_lens)
    bonus = pred.gather(1, capped[:, None])[:, 0]
    return AcceptOut(capped.to(torch.int32), bonus, trim.to(torch.int32))


def sampling_accept(candidates: torch.Tensor, target_probs: torch.Tensor, draft_probs: torch.Tensor | None,
                    coins: torch.Tensor, resample_noise: torch.Tensor,
                    verify_lens: torch.Tensor | None = None) -> AcceptOut:
    bs, width = candidates.shape
    gamma = width - 1
    acc = compute_dtype(target_probs, draft_probs)
    cand = candidates.to(torch.int64)
    drafts = cand[:, 1:]
    rows = torch.arange(bs, device=cand.device)

    # Accept test: only the probabilities at the drafted tokens are read.
    p_d = target_probs[:, :gamma].gather(2, drafts[:, :, None])[:, :, 0].to(acc)
    if draft_probs is None:
        q_d = torch.ones_like(p_d)
    else:
        q_d = draft_probs.gather(2, drafts[:, :, None])[:, :, 0].to(acc)
    u = coins.to(acc)
    raw = _leading_true((q_d > 0) & (u * q_d < p_d))
    capped, trim = _cap(raw, verify_lens)

    # Resample at row k = raw: residual max(p_k - q_k, 0), or p_gamma after a full accept.
    p_k = target_probs[rows, raw].to(acc)  # [bs, V]
    has_draft_row = raw < gamma
    k_q = raw.clamp(max=gamma - 1)
    if draft_probs is None:
        next_draft = cand[rows, (raw + 1).clamp(max=gamma)]
        hot = torch.arange(p_k.shape[1], device=cand.device)[None, :] == next_draft[:, None]
        q_k = (hot & has_draft_row[:, None]).to(acc)
    else:
        q_k = torch.where(has_draft_row[:, None], draft_probs[rows, k_q].to(acc), 0.0)
    residual = (p_k - q_k).clamp_min(0)
    has_mass = (residual > 0).any(dim=1, keepdim=True)
    weights = torch.where(has_mass, residual, p_k)
    drawn = torch.argmax(weights * resample_noise.to(acc), dim=1)

    # A capped row already owns its next token: the draft that passed at row `capped`.
    carried = cand[rows, (capped + 1).clamp(max=gamma)]
    bonus = torch.where(capped < raw, carried, drawn)
    return AcceptOut(capped.to(torch.int32), bonus, trim.to(torch.int32))


def select_mixed(greedy: AcceptOut, sampled: AcceptOut, greedy_mask: torch.Tensor) -> AcceptOut:
    """Per row, the greedy result where ``greedy_mask`` else the sampled one."""
    return AcceptOut(
        torch.where(greedy_mask, greedy.correct_len, sampled.correct_len),
        torch.where(greedy_mask, greedy.bonus, sampled.bonus),
        torch.where(greedy_mask, greedy.cap_trim, sampled.cap_trim),
    )


def finalize(prefix_lens: torch.Tensor, drafts: torch.Tensor, accept: AcceptOut) -> Finalized:
    bs, gamma = drafts.shape
    correct = accept.correct_len.to(torch.int64)[:, None]
    slot = torch.arange(gamma + 1, device=drafts.device)[None, :]
    padded = torch.cat([drafts.to(torch.int64), drafts.new_full((bs, 1), -1, dtype=torch.int64)], dim=1)
    out = torch.where(slot < correct, padded, torch.where(slot == correct, accept.bonus.to(torch.int64)[:, None], -1))
    commit = (accept.correct_len.to(torch.int32) + 1)
    return Finalized(commit, prefix_lens.to(torch.int64) + commit, out)
