"""Sampling parameters that read a request's history (SGLang's penaltylib, min_new_tokens and logit bias).

A request's ledger counts its emitted output tokens (the first sampled one included) and advances only with
emitted tokens: never with drafts, never with rejected ones. Column j of a drafted block `[anchor, d_1..d_gamma]`
reads the ledger plus d_1..d_j, the output the request would hold if those drafts were committed, so a verify reads
at each position what plain decoding would read there.

The order is SGLang's: the additive penalties (frequency, presence, the min_new_tokens mask), then the scaling
one (repetition), then the logit bias.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch


def uses_history(params) -> bool:
    """Whether any of these parameters changes a logit (most requests set none, and skip the work)."""
    return bool(params.frequency_penalty or params.presence_penalty or params.repetition_penalty != 1.0
                or params.min_new_tokens or params.logit_bias)


@dataclass
class PenaltyLedger:
    """One request's output history, as its parameters read it."""

    counts: torch.Tensor  # [V] float64: occurrences of each token in the output
    output_len: int = 0
    seen: set = field(default_factory=set)

    @classmethod
    def of(cls, vocab_size: int, output: Sequence[int]) -> "PenaltyLedger":
        ledger = cls(torch.zeros(vocab_size, dtype=torch.float64))
        ledger.record(output)
        return ledger

    def record(self, tokens: Sequence[int]) -> None:
        for t in tokens:
            self.counts[t] += 1
            self.seen.add(int(t))
        self.output_len += len(tokens)


def _masked_ids(params) -> list:
    """What min_new_tokens keeps from being emitted: the EOS id (ignored or not) and every stop token id."""
    return sorted(({params.eos_id} if params.eos_id is not None else set()) | set(params.stop_token_ids))


def process(logits: torch.Tensor, counts: torch.Tensor, output_lens: torch.Tensor, params) -> torch.Tensor:
    """One request's logits [n, V] after its parameters, each row reading its own counts [n, V] and output length [n]."""
    x = logits - params.frequency_penalty * counts - params.presence_penalty * (counts > 0).to(logits.dtype)
    if params.min_new_tokens:
        early = (output_lens < params.min_new_tokens)[:, None]
        masked = torch.zeros(x.shape[-1], dtype=torch.bool)
        masked[_masked_ids(params)] = True
        x = torch.where(early & masked, float("-inf"), x)
    if params.repetition_penalty != 1.0:
        r = params.repetition_penalty
        x = torch.where(counts > 0, torch.where(x < 0, x * r, x / r), x)
    for tok, bias in params.logit_bias:
        x[:, tok] += bias
    return x


def process_block(logits: torch.Tensor, candidates: torch.Tensor, states) -> torch.Tensor:
    """The block's target logits [bs, T, V] after each request's parameters, column j reading the ledger plus the
    drafts before it. Rows whose parameters read no history are left as they are."""
    out = None
    for i, st in enumerate(states):
        if not uses_history(st.params):
            continue
        out = logits.clone() if out is None else out
        T, V = logits.shape[1], logits.shape[2]
        drafts = torch.nn.functional.one_hot(candidates[i, 1:], V).to(torch.float64)
        before = torch.cat([torch.zeros(1, V, dtype=torch.float64), torch.cumsum(drafts, 0)])[:T]
        counts = st.ledger.counts[None, :] + before
        lens = st.ledger.output_len + torch.arange(T)
        out[i] = process(logits[i], counts.to(logits.dtype), lens, st.params)
    return logits if out is None else out


def process_first(logits: torch.Tensor, params: Sequence) -> torch.Tensor:
    """The prefill's last-position logits [bs, V] after each request's parameters, before any output."""
    out = logits.clone()
    V = logits.shape[-1]
    for i, p in enumerate(params):
        if uses_history(p):
            out[i] = process(logits[i: i + 1], torch.zeros(1, V, dtype=logits.dtype), torch.zeros(1, dtype=torch.int64), p)[0]
    return out


def min_p_cut(probs: torch.Tensor, min_ps: Sequence[float]) -> torch.Tensor:
    """Each row [bs, ..., V] keeps the tokens at least min_p times as likely as its likeliest, renormalised."""
    out = probs
    for i, m in enumerate(min_ps):
        if m > 0:
            out = out.clone() if out is probs else out
            row = probs[i]
            kept = torch.where(row >= m * row.amax(-1, keepdim=True), row, 0.0)
            out[i] = kept / kept.sum(-1, keepdim=True)
    return out
