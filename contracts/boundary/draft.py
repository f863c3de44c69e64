"""Draft level: where the draft forward of one decode step reads and writes, and what the commit puts back.

The verify window of a request with committed length n covers positions n .. n+T-1 (anchor, then the gamma
drafts) at the KV slots its request-to-token row holds there. The draft forward reads Q query rows at the first
Q of them; after the verify, the target's features of the committed columns (col < commit_len) are written into
the draft's context at those columns' positions, and no other column is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Tuple


@dataclass(frozen=True)
class DraftCase:
    gamma: int
    sample_from_anchor: bool
    prefix_lens: Tuple[int, ...]  # committed lengths
    bonus_tokens: Tuple[int, ...]  # the anchors, token ids in [0, 64)
    commit_lens: Tuple[int, ...]  # what the verify committed, 1..T per request
    seed: int = 0

    @property
    def bs(self) -> int:
        return len(self.prefix_lens)


@dataclass(frozen=True)
class DraftObservation:
    query_width: int  # Q, the draft forward's rows per request
    mask_token_id: int
    input_ids: Tuple[Tuple[int, ...], ...]  # [bs][Q] the draft forward's input ids
    positions: Tuple[Tuple[int, ...], ...]  # [bs][Q]
    cache_locs: Tuple[Tuple[int, ...], ...]  # [bs][Q] the KV slots the draft forward writes
    row_slots: Tuple[Tuple[int, ...], ...]  # [bs][T] the request-to-token row at positions n .. n+T-1
    draft_tokens: Tuple[Tuple[int, ...], ...]  # [bs][gamma]
    inject_written: Tuple[Tuple[bool, ...], ...]  # [bs][T] the commit wrote this verify column into the draft context
    inject_positions: Tuple[Tuple[int, ...], ...]  # [bs][T] the position it wrote (read where written)
    inject_rows: Tuple[Tuple[int, ...], ...]  # [bs][T] the verify row whose target features it wrote


@dataclass(frozen=True)
class OracleDraftObservation:
    """A step drafted by an oracle drafter (it knows the target's greedy continuation) and verified greedily."""

    draft_tokens: Tuple[Tuple[int, ...], ...]  # [bs][gamma]
    target_argmax: Tuple[Tuple[int, ...], ...]  # [bs][T] the target's greedy token after each verify position
    correct_len: Tuple[int, ...]
    commit_len: Tuple[int, ...]


class DraftLevel(Protocol):
    def draft_step(self, case: DraftCase) -> DraftObservation: ...  # one draft forward and the commit after its verify


class OracleDraftLevel(Protocol):
    def oracle_draft_verify(self, case: DraftCase) -> OracleDraftObservation: ...


class MarkovDraftLevel(Protocol):
    """DSpark's Markov block sampling, fed the drafter's per-position logits directly: draft k is drawn from
    base_k + bias[previous token] (the anchor for the first draft, then the block's own drafts) at the request's
    temperature, greedily at T = 0.

    markov_draft(base_logits [bs, n, V] float32, bias [V, V] float32, anchors [bs], temperatures [bs], seeds [bs],
    positions [bs] (the anchor's)) -> (drafts [bs, n] int64, logits [bs, n, V]): the pre-temperature logits the
    engine leaves for its verify to score each draft with (its law is softmax(logits / T))."""

    def markov_draft(self, base_logits, bias, anchors, temperatures, seeds, positions) -> tuple: ...


def markov_shapes(base_logits, bias) -> tuple:
    """(bs, n, V) of a markov_draft call, after checking its two tables agree (a pack calls it before its engine)."""
    if base_logits.dim() != 3:
        raise ValueError(f"base_logits: expected [bs, n, V], got {tuple(base_logits.shape)}")
    bs, n, vocab = base_logits.shape
    if tuple(bias.shape) != (vocab, vocab):
        raise ValueError(f"bias: expected [V, V] = [{vocab}, {vocab}], got {tuple(bias.shape)}")
    return bs, n, vocab
