"""The target's sampling law for one request (temperature, then top-k, then top-p: SGLang's order), and the
counter-based uniforms the engine's draws come from."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of uint64 that scatters neighbouring inputs."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def counter_uniforms(keys: Sequence[int], n: int) -> torch.Tensor:
    """[len(keys), n] float64 uniforms in (0, 1): value j of row r is SplitMix64 step j + 1 from the mixed key.

    A counter-based stream, so all rows come from one vectorised pass instead of one seeded generator per row.
    The key is mixed first: keys that differ by a multiple of the golden step (request_key's seed term is one)
    would otherwise start streams that are shifts of each other. numpy's uint64 arithmetic wraps modulo 2**64 by
    definition (torch's int64 overflow is not specified); 52 bits + 1/2 keep both 0 and 1 out.
    """
    base = _mix(np.asarray(list(keys), dtype=np.uint64).reshape(-1, 1) + _GOLDEN)
    z = _mix(base + np.arange(1, n + 1, dtype=np.uint64) * _GOLDEN)
    return torch.from_numpy(((z >> np.uint64(12)).astype(np.float64) + 0.5) * 2.0 ** -52)


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
        if not (0 < top_ks[i] < v or top_ps[i] < 1):
            continue  # uncut: the softmax row as it is
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
