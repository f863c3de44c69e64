"""The target's sampling law for one request: temperature, then top-k, then top-p (SGLang's order)."""

from __future__ import annotations

from typing import Sequence

import torch


def target_probs(logits: torch.Tensor, temperatures: Sequence[float], top_ks: Sequence[int],
                 top_ps: Sequence[float]) -> torch.Tensor:
    """softmax(logits / T) per request (row 0 of `logits` dims), cut to its top-k then its top-p, renormalised.

    logits [bs, ..., V]; T <= 0 means greedy and is sampled at T = 1 (greedy rows never read these
    probabilities); top_k 0 or >= V and top_p 1 leave a row uncut.
    """
    bs = logits.shape[0]
    if not len(temperatures) == len(top_ks) == len(top_ps) == bs:
        raise ValueError(f"temperatures/top_ks/top_ps: expected {bs} values each")
    shape = (-1,) + (1,) * (logits.dim() - 1)
    temps = torch.tensor([t if t > 0 else 1.0 for t in temperatures], dtype=torch.float64).reshape(shape)
    probs = torch.softmax(logits.to(torch.float64) / temps, dim=-1)
    v = probs.shape[-1]
    for i in range(bs):
        row = probs[i]
        if 0 < top_ks[i] < v:
            kth = torch.topk(row, top_ks[i], dim=-1).values[..., -1:]
            row = torch.where(row >= kth, row, 0.0)
            row = row / row.sum(-1, keepdim=True)
        if top_ps[i] < 1:
            srt = torch.sort(row, dim=-1, descending=True).values
            kept = torch.where(torch.cumsum(srt, -1) - srt < top_ps[i], srt, float("inf"))
            row = torch.where(row >= kept.amin(-1, keepdim=True), row, 0.0)
            row = row / row.sum(-1, keepdim=True)
        probs[i] = row
    return probs
