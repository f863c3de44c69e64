"""The progress board and `Collectives`, the rank's door to its peers.

The board is a few int64 slots per rank in shared memory: the rank writes them, the parent reads them to see
where each rank is without asking it (a rank stuck in a collective cannot answer).
"""

from __future__ import annotations

import ctypes
from typing import List, Sequence

import torch

# Slots of one rank. POS packs (collectives entered, canonical index of the last one) into one word, so one read
# sees both.
STATE, POS, COMPLETED = range(3)
SLOTS = 3
SHIFT = 32
# JOINING: forming the process group; SETUP: building the rank program (imports, engines), READY: built, waiting for
# the peers to be built too. Both count as startup, so a slow build is never read as a stalled collective.
STARTING, JOINING, RUNNING, IN_COLLECTIVE, DONE, FAILED, SETUP, READY = range(8)
STATE_NAMES = ("starting", "joining the process group", "running", "in a collective", "done", "failed",
               "setting up its program", "set up, waiting for its peers to be")
STARTUP_STATES = (STARTING, JOINING, SETUP, READY)


def new_board(ctx, world_size: int):
    """A zeroed board (every rank STARTING) from the multiprocessing context `ctx`."""
    return ctx.RawArray(ctypes.c_int64, world_size * SLOTS)


def read(board, rank: int, ops: Sequence[str]) -> dict:
    """One rank's row: its state, collectives entered and completed, and the step and op of the last one entered."""
    b = rank * SLOTS
    pos = board[b + POS]
    index = pos & ((1 << SHIFT) - 1)
    per_step = max(len(ops), 1)
    return {"state": board[b + STATE], "entered": pos >> SHIFT, "completed": board[b + COMPLETED],
            "step": index // per_step, "op": index % per_step, "index": index}


def position(row: dict) -> int:
    """The number of collectives a rank that follows the program has entered at its last one."""
    return row["index"] + 1 if row["entered"] else 0


def where(row: dict, ops: Sequence[str]) -> str:
    if not row["entered"]:
        return "before its first collective"
    at = "in" if row["state"] == IN_COLLECTIVE else "after"
    return f"{at} step {row['step']} collective '{ops[row['op']]}' (#{row['entered']})"


class Collectives:
    """What a rank program gets as `comm`: its rank, the world, its device and the launch's collective timeout, and
    `all_gather`, which counts every collective on the board so that the parent can tell who skipped one."""

    def __init__(self, rank: int, world_size: int, board, device: torch.device, ops: Sequence[str], *,
                 backend: str, timeout_s: float):
        self.rank, self.world_size, self.board, self.device = rank, world_size, board, device
        self.ops, self.backend, self.timeout_s = tuple(ops), backend, timeout_s
        self._base = rank * SLOTS

    def mark(self, state: int) -> None:
        self.board[self._base + STATE] = state

    @property
    def entered(self) -> int:
        """Collectives this rank has entered so far."""
        return self.board[self._base + POS] >> SHIFT

    def all_gather(self, step: int, op: str, tensor: torch.Tensor) -> List[torch.Tensor]:
        """Every rank's `tensor` (same shape on every rank), in rank order, on the CPU; `op` is one of the program's
        OPS, `step` the step it belongs to."""
        import torch.distributed as dist

        if op not in self.ops:
            raise ValueError(f"op: {op!r} is not one of the program's OPS {self.ops}")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step: expected a non-negative int, got {step!r}")
        self.board[self._base + POS] = ((self.entered + 1) << SHIFT) | (step * len(self.ops) + self.ops.index(op))
        self.mark(IN_COLLECTIVE)
        tensor = tensor.to(self.device).contiguous()
        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(out, tensor)
        self.board[self._base + COMPLETED] += 1
        self.mark(RUNNING)
        return [t.cpu() for t in out]
