"""Draft-forward and commit-inject bugs in the reference engine."""

import torch

from dspark import dspark_draft

from . import Mutant

_real_window = dspark_draft.with_verify_window
_real_inject = dspark_draft.commit_inject_layout


def _slots_one_column_late(fb, window, q):
    """The draft forward writes the window's columns 1..Q instead of 0..Q-1: it overwrites the first draft's slot."""
    shifted = dspark_draft.VerifyWindow(window.positions_2d, torch.roll(window.cache_loc_2d, -1, dims=1))
    return _real_window(fb, shifted, q)


def _gate_includes_the_bonus_column(window, commit_lens):
    """`col <= commit_len`: the first rejected column's features reach the draft context too."""
    return _real_inject(window, commit_lens + 1)


_real_propose = dspark_draft.DraftBlockProposer.propose


def _drafts_one_slot_late(self, drafter, ctx_tokens, ctx_hiddens, anchors, temperatures, gumbel):
    """Slot k carries the draft for position n+k+2: the anchor's own prediction is dropped."""
    out = _real_propose(self, drafter, ctx_tokens, ctx_hiddens, anchors, temperatures, gumbel)
    out.draft_tokens = torch.roll(out.draft_tokens, -1, dims=1)
    return out


MUTANTS = [
    Mutant("drafts-one-slot-late", ("DRAFT-003",),
           lambda mp: mp.setattr(dspark_draft.DraftBlockProposer, "propose", _drafts_one_slot_late)),
    Mutant("draft-kv-slots-one-column-late", ("DRAFT-001",),
           lambda mp: mp.setattr(dspark_draft, "with_verify_window", _slots_one_column_late)),
    Mutant("commit-gate-off-by-one", ("DRAFT-002",),
           lambda mp: mp.setattr(dspark_draft, "commit_inject_layout", _gate_includes_the_bonus_column)),
]
