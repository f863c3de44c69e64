"""Multi-process DP rank bugs: each one is broken code that runs inside one rank process.

The rank processes do not see a monkeypatch of the parent's dspark modules when they are
spawned, so these mutants do not patch the proposer in the parent. They replace the rank
program `dspark.dp_runner.RankProgram`, which the reference adapter looks up at call time and
the launcher hands to every rank process as a class reference (imported by name under spawn,
inherited under fork). The subclass misbehaves on `FAULTY_RANK` only, so a violation must name
that rank. The mutant that makes an idle rank skip a collective also shortens the launcher's
default collective timeout, so the hang it causes turns into a failure within seconds.
"""

from __future__ import annotations

import torch

from contracts import launcher
from dspark import dp_runner
from dspark.dp_runner import RankProgram
from dspark.dspark_draft import DraftBlockProposer

from . import Mutant

FAULTY_RANK = 1
SHORT_TIMEOUT_S = 4.0


class _ScaledOriginalProposer(DraftBlockProposer):
    def _fill_dp_moe_sync_metadata(self, fb, batch):
        super()._fill_dp_moe_sync_metadata(fb, batch)
        if fb.original_global_num_tokens_cpu is not None:  # the historical bug, on one rank
            fb.original_global_num_tokens_cpu = list(fb.global_num_tokens_cpu)


class _ScalesTwiceProposer(DraftBlockProposer):
    def _fill_dp_moe_sync_metadata(self, fb, batch):
        super()._fill_dp_moe_sync_metadata(fb, batch)
        if fb.global_num_tokens_cpu is not None:  # treats already-scaled counts as requests: Q^2
            q = self.query_token_num
            fb.global_num_tokens_cpu = [c * q for c in fb.global_num_tokens_cpu]
            fb.global_num_tokens_gpu = torch.tensor(fb.global_num_tokens_cpu, dtype=torch.int64, device=self.device)


class ScaledOriginalOnOneRank(RankProgram):
    """FAULTY_RANK's proposer writes the scaled token counts into original_global_num_tokens_cpu."""

    faulty_rank = FAULTY_RANK

    def make_proposer(self):
        if self.rank != self.faulty_rank:
            return super().make_proposer()
        cfg = self.cfg
        return _ScaledOriginalProposer(cfg.gamma, mask_token_id=cfg.mask_token_id, sample_from_anchor=cfg.sample_from_anchor,
                                       draft_is_moe=True, attn_dp_enabled=True, enable_num_token_non_padded=True,
                                       device=self.device)


class ScaledOriginalOnRankZero(ScaledOriginalOnOneRank):
    """The same bug on rank 0, so that a one-rank run (one spawned process) shows it."""

    faulty_rank = 0


class ScalesTwiceOnOneRank(RankProgram):
    """FAULTY_RANK's proposer scales the per-rank counts by Q twice."""

    def make_proposer(self):
        if self.rank != FAULTY_RANK:
            return super().make_proposer()
        cfg = self.cfg
        return _ScalesTwiceProposer(cfg.gamma, mask_token_id=cfg.mask_token_id, sample_from_anchor=cfg.sample_from_anchor,
                                    draft_is_moe=True, attn_dp_enabled=True, enable_num_token_non_padded=True,
                                    device=self.device)


class IdleRankSkipsGather(RankProgram):
    """FAULTY_RANK, when idle, returns early instead of joining the draft-token all-gather."""

    def gather_draft_tokens(self, step, fb, views):
        if self.rank == FAULTY_RANK and fb.batch_size == 0:
            return torch.zeros((0, len(dp_runner.ROW_FIELDS)), dtype=torch.int64), 0
        return super().gather_draft_tokens(step, fb, views)


class VerifyTierIgnoresNoBudget(RankProgram):
    """FAULTY_RANK takes the max of the gathered tiers even when a rank has no budget (-1)."""

    def verify_tier(self, gathered_tiers):
        if self.rank != FAULTY_RANK:
            return super().verify_tier(gathered_tiers)
        return max(gathered_tiers) if any(t > 0 for t in gathered_tiers) else None


def _program(cls, *, timeout_s=None):
    def patch(mp):
        mp.setattr(dp_runner, "RankProgram", cls)
        if timeout_s is not None:
            mp.setattr(launcher, "DEFAULT_TIMEOUT_S", timeout_s)
    return patch


MUTANTS = [
    Mutant("rank-writes-scaled-original-counts", ("RANKS-002", "RANKS-003"), _program(ScaledOriginalOnOneRank)),
    Mutant("idle-rank-skips-draft-gather", ("RANKS-005",), _program(IdleRankSkipsGather, timeout_s=SHORT_TIMEOUT_S)),
    Mutant("rank-scales-counts-twice", ("RANKS-001", "RANKS-004"), _program(ScalesTwiceOnOneRank)),
    Mutant("rank-verify-tier-ignores-no-budget", ("RANKS-006",), _program(VerifyTierIgnoresNoBudget)),
]


# ---- TP agreement: a sync site dropped (patched in the parent; the forked ranks inherit it) ----

from dspark import spec_tp_sync  # noqa: E402

_real_tp_sync = spec_tp_sync.SpecTpSync.sync


def _skip_site(site_to_skip):
    def sync(self, site, values):
        return values if site == site_to_skip else _real_tp_sync(self, site, values)
    return sync


TP_MUTANTS = [
    Mutant("tp-accept-not-synced", ("RANKS-007",),
           lambda mp: mp.setattr(spec_tp_sync.SpecTpSync, "sync", _skip_site(spec_tp_sync.SpecTpSyncSite.DSPARK_ACCEPT_GREEDY))),
    Mutant("tp-plan-not-synced", ("RANKS-007",),
           lambda mp: mp.setattr(spec_tp_sync.SpecTpSync, "sync", _skip_site(spec_tp_sync.SpecTpSyncSite.DSPARK_PLAN))),
]
MUTANTS = MUTANTS + TP_MUTANTS
