"""A passive observer: the per-step decision dump (SGLang's SGLANG_DSPARK_DEBUG_DUMP and its recorders hold the same).

It reads the step's plan (the drafts, their confidence, the verify lengths) and keeps plain copies; it must change
nothing the step computes, which OPT-001 checks by running the engine with it off and on.
"""

from __future__ import annotations

from typing import Optional

import torch


def decision(step: int, rids: list, candidates: torch.Tensor, confidence: torch.Tensor,
             verify_lens: Optional[torch.Tensor]) -> dict:
    """One step's plan as plain lists: copies, so a later step's in-place updates cannot rewrite a dumped one."""
    return {"step": step, "rids": list(rids), "candidates": candidates.tolist(),
            "confidence": confidence.to(torch.float64).tolist(),
            "verify_lens": None if verify_lens is None else verify_lens.tolist()}
