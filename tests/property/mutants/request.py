"""Whole-request bugs: parameters that read the wrong history inside a drafted block, a ledger fed drafts, a stop token
inside the accepted prefix ignored, min_p left out of the law the accept reads."""

import dataclasses

import torch

from dspark import penalties
from dspark.engine import DSparkEngine

from . import Mutant

_real_commit = DSparkEngine._commit
_real_target_probs = DSparkEngine._target_probs
_real_truncate = DSparkEngine._truncate


def _block(logits, candidates, states, *, count_drafts: bool, advance_len: bool, whole_block: bool = False):
    """process_block with its per-column readings switchable: the drafts before a column counted (or every draft of
    the block, at every column), and the output length advancing with them."""
    out = logits.clone()
    T, V = logits.shape[1], logits.shape[2]
    for i, st in enumerate(states):
        if penalties.uses_history(st.params):
            drafts = torch.nn.functional.one_hot(candidates[i, 1:], V).to(torch.float64)
            before = torch.cat([torch.zeros(1, V, dtype=torch.float64), torch.cumsum(drafts, 0)])[:T]
            before = drafts.sum(0).expand(T, V) if whole_block else before
            counts = st.ledger.counts[None, :] + (before if count_drafts else 0 * before)
            lens = st.ledger.output_len + (torch.arange(T) if advance_len else torch.zeros(T, dtype=torch.int64))
            out[i] = penalties.process(logits[i], counts.to(logits.dtype), lens, st.params)
    return out


def _block_reads_committed_only(logits, candidates, states):
    """Every column's penalties read the ledger as the step found it: the drafts before a column are not counted."""
    return _block(logits, candidates, states, count_drafts=False, advance_len=True)


def _min_new_counter_stalls(logits, candidates, states):
    """The min_new_tokens counter stays at the step's start for every column (it does not advance with drafts)."""
    return _block(logits, candidates, states, count_drafts=True, advance_len=False)


def _penalties_count_the_whole_block(logits, candidates, states):
    """Every column's penalties count every draft of the block, the ones after the column too."""
    return _block(logits, candidates, states, count_drafts=True, advance_len=True, whole_block=True)


def _ledger_counts_drafts(self, st, anchor, drafts, correct):
    """The ledger takes the whole drafted block, rejected drafts included."""
    _real_commit(self, st, anchor, drafts, correct)
    st.ledger.record(drafts[correct:])


def _target_law_without_min_p(self, logits, temps, params):
    return _real_target_probs(self, logits, temps, [dataclasses.replace(p, min_p=0.0) for p in params])


def _stop_only_at_block_end(self, st, emitted):
    """Only the last token a step emits is checked against the stop set: a stop token inside the accepted prefix is
    emitted and decoding goes on past it."""
    room = st.params.max_new_tokens - len(st.output)
    head = emitted[:-1][:max(room, 0)]
    st.output.extend(head)
    st.ledger.record(head)
    rest = emitted[len(head):] if len(head) == len(emitted) - 1 else []
    done = _real_truncate(self, st, rest)  # the last token, and max_new_tokens
    emitted[:] = head + rest
    return done


MUTANTS = [
    Mutant("block-columns-read-committed-history-only", ("REQ-001", "REQ-002", "REQ-003", "REQ-005"),
           lambda mp: mp.setattr(penalties, "process_block", _block_reads_committed_only)),
    Mutant("penalties-count-the-whole-block", ("REQ-001", "REQ-005"),
           lambda mp: mp.setattr(penalties, "process_block", _penalties_count_the_whole_block)),
    Mutant("min-new-tokens-counter-stalls-in-block", ("REQ-001", "REQ-005"),
           lambda mp: mp.setattr(penalties, "process_block", _min_new_counter_stalls)),
    Mutant("penalty-ledger-counts-rejected-drafts", ("REQ-004",),
           lambda mp: mp.setattr(DSparkEngine, "_commit", _ledger_counts_drafts)),
    Mutant("target-law-without-min-p", ("REQ-002", "REQ-003"),
           lambda mp: mp.setattr(DSparkEngine, "_target_probs", _target_law_without_min_p)),
    Mutant("stop-token-inside-accepted-prefix-ignored", ("REQ-001",),
           lambda mp: mp.setattr(DSparkEngine, "_truncate", _stop_only_at_block_end)),
]
