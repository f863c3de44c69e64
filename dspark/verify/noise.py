"""Draw the explicit randomness the sampling verify consumes.

Kept apart from the ops so callers can seed, replay and share these tensors
between the torch and Triton paths.
"""

from __future__ import annotations

import torch


def draw_coins(bs: int, gamma: int, *, generator: torch.Generator | None = None,
               device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Acceptance coins u [bs, gamma], uniform on [0, 1)."""
    return torch.rand(bs, gamma, generator=generator, device=device, dtype=dtype)


def draw_resample_noise(bs: int, vocab: int, *, generator: torch.Generator | None = None,
                        device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Resample noise w [bs, vocab] = 1 / E with E ~ Exp(1), finite and > 0.

    ``argmax_x r(x) * w(x)`` is then a draw from ``r / sum(r)`` (exponential race).
    E is drawn in float64 and kept off zero so that w stays finite in ``dtype``.
    """
    e = torch.empty(bs, vocab, dtype=torch.float64, device=device).exponential_(generator=generator)
    return (1.0 / e.clamp_min(torch.finfo(dtype).tiny)).to(dtype)
