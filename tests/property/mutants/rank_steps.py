"""Idle-rank bugs of whole DP steps, each in a rank program that runs inside the rank processes.

As in `ranks`, the mutants replace the rank program (`dspark.dp_steps.StepRankProgram`, looked up by the reference
adapter at call time and inherited by the forked ranks) with a subclass that misbehaves on an idle rank only, and
only where the bug lives: a step kind or a verify mode other than static. None of them changes a collective's
shape, so none waits out a timeout while Hypothesis shrinks.
"""

from __future__ import annotations

import dataclasses

from dspark import dp_steps
from dspark.dp_steps import VERIFY_KINDS, StepRankProgram
from dspark.schedule_batch import ForwardMode

from . import Mutant


def _idle(program, step: int) -> bool:
    return program.cfg.batch_sizes[step][program.rank] == 0


class IdlePrefillRankRunsExtend(StepRankProgram):
    """At a prefill step an idle rank builds an EXTEND batch of no tokens instead of an IDLE one (the mode that
    tells the model to skip attention for a rank with nothing to run)."""

    def forward_batch(self, step, batch, proposer):
        fb = super().forward_batch(step, batch, proposer)
        if self.cfg.kinds[step] == "prefill" and _idle(self, step):
            fb.forward_mode = ForwardMode.EXTEND
        return fb


class IdleRankVerifiesOneRowWhenRagged(StepRankProgram):
    """In a ragged mode (cap-accept, compact) an idle rank at a verify step counts one verify row: an empty plan
    padded to one token, as if a batch could not be empty."""

    def verify_layout(self, step, bs, lens):
        cells, real = super().verify_layout(step, bs, lens)
        if self.mode != "static" and self.cfg.kinds[step] in VERIFY_KINDS and _idle(self, step):
            return cells, max(real, 1)
        return cells, real


class IdleRankRunsEagerWhenRagged(StepRankProgram):
    """In a ragged mode an idle rank at a verify step skips the graph its peers replay (it has no row of its own to
    run), though it pads to the shared size: a graph's collectives would then find one rank missing."""

    def agree_verify_rows(self, step, real):
        padding, rank_real = super().agree_verify_rows(step, real)
        if self.mode != "static" and self.cfg.kinds[step] in VERIFY_KINDS and _idle(self, step):
            padding = dataclasses.replace(padding, graph=False)
        return padding, rank_real


class IdleRankKeepsVerifyPaddingWhenRagged(StepRankProgram):
    """In a ragged mode an idle rank trims the gathered verify chunks to the agreed padded count, not to each rank's
    real rows: it keeps the padding rows as if they were verify tokens."""

    def gather_rows(self, step, op, rows, pad, counts):
        if op == "verify_tokens" and self.mode != "static" and self.cfg.kinds[step] in VERIFY_KINDS and _idle(self, step):
            counts = [pad] * len(counts)
        return super().gather_rows(step, op, rows, pad, counts)


def _program(cls):
    return lambda mp: mp.setattr(dp_steps, "StepRankProgram", cls)


MUTANTS = [
    Mutant("idle-prefill-rank-runs-extend", ("RANKS-008",), _program(IdlePrefillRankRunsExtend)),
    Mutant("idle-rank-verifies-one-row-when-ragged", ("RANKS-009",), _program(IdleRankVerifiesOneRowWhenRagged)),
    Mutant("idle-rank-runs-eager-when-ragged", ("RANKS-009",), _program(IdleRankRunsEagerWhenRagged)),
    Mutant("idle-rank-keeps-verify-padding-when-ragged", ("RANKS-010",), _program(IdleRankKeepsVerifyPaddingWhenRagged)),
]
