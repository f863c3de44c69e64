"""Draft-forward and commit-inject bugs in the reference engine."""

import torch

from dspark import dspark_draft, toy_models

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


_real_draw = toy_models.draw_tokens


def _draw_without_temperature(logits, temperatures, gumbel):
    """Sampled drafts drawn at T = 1 whatever the request's temperature (the verify still scores softmax(logits / T))."""
    return _real_draw(logits, torch.where(temperatures > 0, 1.0, 0.0).to(temperatures.dtype), gumbel)


_real_sample_block = toy_models.ToyDrafter.sample_block


def _bias_from_the_anchor(self, base, hidden, anchors, temperatures, gumbel):
    """Every draft's Markov bias reads the anchor, not the draft before it: position 0 alone is right."""
    rows = [_real_sample_block(self, base[:, k:k + 1], hidden[:, k:k + 1], anchors, temperatures, gumbel[:, k:k + 1])
            for k in range(base.shape[1])]
    return tuple(torch.cat(parts, dim=1) for parts in zip(*rows))


MUTANTS = [
    Mutant("markov-draft-without-temperature", ("DRAFT-004",),
           lambda mp: mp.setattr(toy_models, "draw_tokens", _draw_without_temperature)),
    Mutant("markov-bias-from-the-anchor", ("DRAFT-004",),
           lambda mp: mp.setattr(toy_models.ToyDrafter, "sample_block", _bias_from_the_anchor)),
    Mutant("drafts-one-slot-late", ("DRAFT-003",),
           lambda mp: mp.setattr(dspark_draft.DraftBlockProposer, "propose", _drafts_one_slot_late)),
    Mutant("draft-kv-slots-one-column-late", ("DRAFT-001",),
           lambda mp: mp.setattr(dspark_draft, "with_verify_window", _slots_one_column_late)),
    Mutant("commit-gate-off-by-one", ("DRAFT-002",),
           lambda mp: mp.setattr(dspark_draft, "commit_inject_layout", _gate_includes_the_bonus_column)),
]
