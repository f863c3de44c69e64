"""Agreement inside a tensor-parallel group (SGLang `spec_tp_sync.SpecTpSync`).

The ranks of one TP group compute the same verify decision from inputs that may differ in the last bits
(non-deterministic reductions), and every collective that follows needs one shape. So at each sync site
the group takes rank 0's values: a broadcast, in place. With one rank there is nothing to sync.
"""

from __future__ import annotations

import enum
from typing import Optional

import torch

from dspark import _validate


class SpecTpSyncSite(enum.IntEnum):
    DSPARK_PLAN = 7  # the planner's verify lengths
    DSPARK_ACCEPT_GREEDY = 8  # correct_len, bonus, cap_trim of a greedy accept
    DSPARK_ACCEPT_SAMPLE = 9


class SpecTpSync:
    def __init__(self, world_size: int = 1, group: Optional[object] = None, src: int = 0):
        self.world_size, self.group = _validate.positive_int("world_size", world_size), group
        if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < self.world_size:
            raise ValueError(f"src: expected a rank in [0, {self.world_size}), got {src!r}")
        self.src = src

    def sync(self, site: SpecTpSyncSite, values: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.broadcast(values, src=self.src, group=self.group)
        return values


def verify_under_tp_sync(confidence: torch.Tensor, budget: int, candidates: torch.Tensor, target_logits: torch.Tensor,
                         prefix_lens: torch.Tensor, tp_sync: SpecTpSync):
    """One greedy verify step of a TP rank: plan the verify lengths, accept, finalize, syncing at each site.

    Returns (local verify lengths before the sync, verify lengths, AcceptOut, Finalized)."""
    from dspark import planner, verify

    local = planner.schedule_verify_lens(planner.survival(confidence), budget)
    lens = tp_sync.sync(SpecTpSyncSite.DSPARK_PLAN, local.clone())
    acc = verify.greedy_accept(candidates, target_logits, lens)
    for t in (acc.correct_len, acc.bonus, acc.cap_trim):
        tp_sync.sync(SpecTpSyncSite.DSPARK_ACCEPT_GREEDY, t)
    return local, lens, acc, verify.finalize(prefix_lens, candidates[:, 1:], acc)
