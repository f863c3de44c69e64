"""Weights-free toy models for the reference engine: float64, CPU, deterministic from a seed.

`ToyTarget` plays the target model: the next-token law depends on the last two
tokens only, `logits = A[x_-1] + beta * C[hash(x_-2, x_-1) % H]`, so a "KV cache"
is just the committed token list. `ToyDrafter` plays the DSpark drafter: one
parallel forward over `[anchor, MASK...]` gives base logits that never read the
sampled drafts, then a Markov head (vanilla / gated / rnn) adds a bias from the
token drafted just before, and a confidence head scores each position from its
hidden row and that previous token only.

Drafters share one call: `draft_block(ctx_tokens, ctx_hiddens, anchors, gamma,
temperatures, gumbel, query_token_num)` -> `(draft_tokens [bs, gamma] int64,
step_logits [bs, gamma, V] float64, confidence [bs, gamma] float64)`. Draws are
Gumbel-max over the explicit noise: `argmax(logits / T + gumbel)`, plain
argmax where `T == 0`. `OracleDrafter` and `RandomDrafter` are test doubles.
"""

from __future__ import annotations

from typing import Sequence

import torch

from dspark import _validate

F64 = torch.float64
MAX_BLOCK = 64  # draft block positions the toy drafter embeds: gamma <= MAX_BLOCK
MARKOV_HEADS = ("vanilla", "gated", "rnn")
_NO_TOKEN = -1  # "no x_-2 yet" in the pair hash


def _gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(int(seed))
    return g


def _pair_hash(prev2: torch.Tensor, prev1: torch.Tensor, buckets: int) -> torch.Tensor:
    return ((prev2 + 1) * 1_000_003 + prev1 * 7919 + 17) % buckets


def last_hiddens(ctx_hiddens, hidden_size: int) -> torch.Tensor:
    """[bs, D]: each request's latest context row, zeros for an empty context. The engine's batched context
    (`DraftContextBatch`) answers in one gather; a plain list of tensors is read row by row."""
    if hasattr(ctx_hiddens, "last_rows"):
        return ctx_hiddens.last_rows()
    rows = [h[-1] if h.shape[0] else torch.zeros(hidden_size, dtype=F64) for h in ctx_hiddens]
    return torch.stack(rows) if rows else torch.zeros(0, hidden_size, dtype=F64)


def draw_tokens(logits: torch.Tensor, temperatures: torch.Tensor, gumbel: torch.Tensor) -> torch.Tensor:
    """Gumbel-max per row: `argmax(logits / T + gumbel)`; argmax where `T == 0` (ties: lowest id)."""
    t = temperatures.to(F64)[:, None]
    noisy = logits / torch.where(t > 0, t, 1.0) + gumbel
    return torch.where(t[:, 0] > 0, torch.argmax(noisy, dim=-1), torch.argmax(logits, dim=-1))


class ToyTarget:
    """Second-order toy target. `forward(context, new_tokens)`: row i is the law after `context + new_tokens[:i+1]`."""

    def __init__(self, vocab_size: int = 16, *, hidden_size: int = 8, hash_buckets: int = 31, beta: float = 0.5,
                 scale: float = 2.0, seed: int = 0):
        self.vocab_size = _validate.positive_int("vocab_size", vocab_size)
        self.hidden_size = _validate.positive_int("hidden_size", hidden_size)
        self.hash_buckets = _validate.positive_int("hash_buckets", hash_buckets)
        g = _gen(seed)
        V, D, H = vocab_size, hidden_size, hash_buckets
        self.A = scale * torch.randn(V, V, generator=g, dtype=F64)
        self.C = scale * torch.randn(H, V, generator=g, dtype=F64)
        self.beta = float(beta)
        self.E = torch.randn(V, D, generator=g, dtype=F64)
        self.F = 0.5 * torch.randn(H, D, generator=g, dtype=F64)

    def logits_and_hidden(self, prev2: torch.Tensor, prev1: torch.Tensor):
        """Logits and hidden state of the position whose last two tokens are (prev2, prev1); -1 = none."""
        h = _pair_hash(prev2, prev1, self.hash_buckets)
        return self.A[prev1] + self.beta * self.C[h], self.E[prev1] + self.F[h]

    def forward_pairs(self, prev2: torch.Tensor, tokens: torch.Tensor):
        """Vectorised core: `tokens [..., n]` with the token before each row's first token in `prev2 [...]`."""
        before = torch.cat([prev2[..., None], tokens[..., :-1]], dim=-1)
        return self.logits_and_hidden(before, tokens)

    def forward(self, context: Sequence[int], new_tokens: Sequence[int]):
        """Logits [n, V] and hidden states [n, D] for the n new tokens after `context`."""
        new = torch.as_tensor(list(new_tokens), dtype=torch.int64)
        if new.numel() == 0:
            return torch.zeros(0, self.vocab_size, dtype=F64), torch.zeros(0, self.hidden_size, dtype=F64)
        prev2 = torch.tensor(context[-1] if len(context) else _NO_TOKEN, dtype=torch.int64)
        return self.forward_pairs(prev2, new)

    def next_logits(self, sequence: Sequence[int]) -> torch.Tensor:
        """Logits [V] of the token after the (non-empty) `sequence`."""
        if not len(sequence):
            raise ValueError("sequence: the target needs at least one token of context")
        return self.forward(sequence[:-1], sequence[-1:])[0][0]

    def next_probs(self, sequence: Sequence[int], temperature: float = 1.0) -> torch.Tensor:
        return torch.softmax(self.next_logits(sequence) / temperature, dim=-1)


class ToyDrafter:
    """The DSpark drafter: parallel base logits, a Markov head, a confidence head."""

    def __init__(self, target: ToyTarget, *, markov_head: str = "vanilla", rank: int | None = None, seed: int = 1,
                 base_scale: float = 0.3, sts_temperatures: Sequence[float] | None = None, mask_token_id: int | None = None):
        if markov_head not in MARKOV_HEADS:
            raise ValueError(f"markov_head: expected one of {MARKOV_HEADS}, got {markov_head!r}")
        self.markov_head = markov_head
        self.vocab_size, self.hidden_size = target.vocab_size, target.hidden_size
        self.mask_token_id = self.vocab_size - 1 if mask_token_id is None else mask_token_id
        self.sts_temperatures = None if sts_temperatures is None else [float(t) for t in sts_temperatures]
        if self.sts_temperatures is not None and any(t <= 0 for t in self.sts_temperatures):
            raise ValueError("sts_temperatures: every temperature must be > 0")
        V, D = self.vocab_size, self.hidden_size
        r = V if rank is None else max(1, min(_validate.positive_int("rank", rank), V))  # None: full rank
        g = _gen(seed)
        # Markov head initialised from a rank-r SVD of the target's bigram table A.
        U, S, Vh = torch.linalg.svd(target.A)
        self.W1 = U[:, :r] * S[:r].sqrt()  # [V, r] embedding of the previous token
        self.W2 = S[:r].sqrt()[:, None] * Vh[:r]  # [r, V]
        self.Wctx = torch.randn(D, D, generator=g, dtype=F64) / D ** 0.5
        self.Wtok = torch.randn(V, D, generator=g, dtype=F64)
        self.Wpos = torch.randn(MAX_BLOCK, D, generator=g, dtype=F64)
        self.Wout = base_scale * torch.randn(D, V, generator=g, dtype=F64)
        self.Wg = torch.randn(D + r, r, generator=g, dtype=F64) / (D + r) ** 0.5
        self.Wj = torch.randn(r + r + D, 3 * r, generator=g, dtype=F64) / (2 * r + D) ** 0.5
        self.conf_w = 0.3 * torch.randn(D, generator=g, dtype=F64)
        self.conf_u = 0.3 * torch.randn(r, generator=g, dtype=F64)
        self.conf_a, self.conf_b = 4.0, -1.5

    # ---- the parallel block forward (never reads sampled drafts) ------------

    def block_hidden(self, ctx_hiddens: Sequence[torch.Tensor], anchors: torch.Tensor, query_token_num: int) -> torch.Tensor:
        """Hidden rows [bs, Q, D] of the non-causal block `[anchor, MASK x (Q-1)]`."""
        ctx = last_hiddens(ctx_hiddens, self.hidden_size)
        block = (ctx @ self.Wctx + self.Wtok[anchors])[:, None, :]  # every row sees the anchor (bidirectional)
        is_mask = (torch.arange(query_token_num) > 0)[None, :, None]
        block = block + self.Wpos[:query_token_num][None] + self.Wtok[self.mask_token_id] * is_mask
        return torch.tanh(block)

    # ---- the sequential heads ----------------------------------------------

    def markov_bias(self, prev: torch.Tensor, h: torch.Tensor, state: torch.Tensor | None):
        e = self.W1[prev]  # [bs, r]
        if self.markov_head == "vanilla":
            return e @ self.W2, state
        if self.markov_head == "gated":
            g = torch.sigmoid(torch.cat([h, e], -1) @ self.Wg)
            return (g * e) @ self.W2, state
        s = torch.zeros_like(e) if state is None else state
        gate, cand, out = (torch.cat([s, e, h], -1) @ self.Wj).chunk(3, dim=-1)
        s = torch.sigmoid(gate) * s + (1 - torch.sigmoid(gate)) * torch.tanh(cand)
        return (torch.tanh(out) + e) @ self.W2, s

    def confidence(self, h: torch.Tensor, prev: torch.Tensor, k: int) -> torch.Tensor:
        """c_k from (h_k, prev_k) only: never from d_{k+1} or later."""
        e = self.W1[prev]
        maxprob = torch.softmax(h @ self.Wout + e @ self.W2, dim=-1).max(dim=-1).values
        raw = self.conf_a * maxprob + self.conf_b + h @ self.conf_w + e @ self.conf_u
        t = 1.0 if self.sts_temperatures is None else self.sts_temperatures[k]
        return torch.sigmoid(raw / t)

    def draft_block(self, ctx_tokens, ctx_hiddens, anchors: torch.Tensor, gamma: int, temperatures: torch.Tensor,
                    gumbel: torch.Tensor, query_token_num: int):
        hidden = self.block_hidden(ctx_hiddens, anchors, query_token_num)
        hidden = hidden[:, query_token_num - gamma:]  # sample_from_anchor=False drops the anchor row
        return self.sample_block(hidden @ self.Wout, hidden, anchors, temperatures, gumbel)

    def sample_block(self, base: torch.Tensor, hidden: torch.Tensor, anchors: torch.Tensor, temperatures: torch.Tensor,
                     gumbel: torch.Tensor):
        """The sequential part of the block: draft k from base[:, k] plus the Markov bias of the token before it (the
        anchor, then the block's own drafts). Returns (tokens, the logits each was drawn from, confidences)."""
        bs, gamma = base.shape[:2]
        tokens = torch.zeros(bs, gamma, dtype=torch.int64)
        logits = torch.zeros(bs, gamma, self.vocab_size, dtype=F64)
        conf = torch.zeros(bs, gamma, dtype=F64)
        prev, state = anchors.to(torch.int64), None
        for k in range(gamma):
            bias, state = self.markov_bias(prev, hidden[:, k], state)
            logits[:, k] = base[:, k] + bias
            conf[:, k] = self.confidence(hidden[:, k], prev, k)
            prev = draw_tokens(logits[:, k], temperatures, gumbel[:, k])
            tokens[:, k] = prev
        return tokens, logits, conf


class OracleDrafter:
    """Test double: drafts from the target itself (argmax when greedy, a draw from p when sampling), so every draft passes."""

    def __init__(self, target: ToyTarget, confidence: float = 0.9):
        self.target, self.conf = target, float(confidence)
        self.vocab_size = target.vocab_size

    def draft_block(self, ctx_tokens, ctx_hiddens, anchors, gamma, temperatures, gumbel, query_token_num):
        bs = anchors.shape[0]
        tokens = torch.zeros(bs, gamma, dtype=torch.int64)
        logits = torch.zeros(bs, gamma, self.vocab_size, dtype=F64)
        prev2 = torch.tensor([c[-1] if len(c) else _NO_TOKEN for c in ctx_tokens], dtype=torch.int64)
        prev = anchors.to(torch.int64)
        for k in range(gamma):
            logits[:, k] = self.target.logits_and_hidden(prev2, prev)[0]
            tok = draw_tokens(logits[:, k], temperatures, gumbel[:, k])
            prev2, prev = prev, tok
            tokens[:, k] = tok
        return tokens, logits, torch.full((bs, gamma), self.conf, dtype=F64)


class RandomDrafter:
    """Test double: uniform drafts (tau close to 1); confidence drawn from the seed, per position."""

    def __init__(self, vocab_size: int, seed: int = 2):
        self.vocab_size = vocab_size
        self._conf = torch.rand(64, generator=_gen(seed), dtype=F64)

    def draft_block(self, ctx_tokens, ctx_hiddens, anchors, gamma, temperatures, gumbel, query_token_num):
        bs = anchors.shape[0]
        logits = torch.zeros(bs, gamma, self.vocab_size, dtype=F64)
        # Uniform q: a greedy row's argmax is token 0, a sampled row's draw is uniform.
        ones = torch.ones_like(temperatures.to(F64))
        tokens = torch.stack([draw_tokens(logits[:, k], ones, gumbel[:, k]) for k in range(gamma)], dim=1) if gamma \
            else torch.zeros(bs, 0, dtype=torch.int64)
        conf = self._conf[:gamma].expand(bs, gamma).clone()
        return tokens, logits, conf


DRAFTERS = ("vanilla", "gated", "rnn", "oracle", "random")


def make_drafter(kind: str, target: ToyTarget, *, seed: int = 1, rank: int | None = None):
    """A drafter by name: a Markov head variant of ToyDrafter, or a test double."""
    if kind in MARKOV_HEADS:
        return ToyDrafter(target, markov_head=kind, seed=seed, rank=rank)
    if kind == "oracle":
        return OracleDrafter(target)
    if kind == "random":
        return RandomDrafter(target.vocab_size, seed=seed)
    raise ValueError(f"drafter: expected one of {DRAFTERS}, got {kind!r}")


def target_greedy_decode(target: ToyTarget, prompt: Sequence[int], max_new_tokens: int, eos_id: int | None = None) -> list:
    """Plain greedy decoding of the target alone (the reference for greedy equivalence)."""
    seq, out = list(prompt), []
    while len(out) < max_new_tokens:
        tok = int(torch.argmax(target.next_logits(seq)))
        out.append(tok)
        seq.append(tok)
        if eos_id is not None and tok == eos_id:
            break
    return out
