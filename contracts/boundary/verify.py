"""Verify level: one verify step's inputs and results, as plain tensors.

Layout (the reference engine's, SGLang's): ``candidates[:, 0]`` is the anchor,
``candidates[:, 1:]`` the gamma drafts; target row ``j`` is the law of the
token after ``candidates[:, j]``, so draft ``j+1`` is tested against row ``j``.

Randomness. An engine that takes its randomness as input (capability
``verify.injected-noise``) consumes coins ``u`` [bs, gamma] uniform on [0, 1)
(draft ``d`` at row ``j`` is accepted iff ``q(d) > 0`` and ``u[:, j] * q(d) <
p(d)``) and resample noise ``w`` [bs, V] = 1/E, E ~ Exp(1) i.i.d. (the bonus is
``argmax_x r(x) * w(x)`` over the unnormalised weights ``r``: the exponential
race). An engine that draws its own randomness (FlashInfer: Philox keyed by
seed and row) is still checkable by the statistical contracts through
``sample_block``, which only promises the right law and same-seed repeatability.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Protocol, Tuple

import torch

from contracts.boundary.engine import RequestSpec


@dataclass(frozen=True)
class VerifyCase:
    """A reproducible recipe for a verify batch; `contracts.strategies.verify.build` makes the tensors.

    Everything random in the tensors comes from ``torch.Generator().manual_seed(seed)``.
    """

    bs: int
    gamma: int
    vocab: int
    target_family: str  # a name in contracts.strategies.verify.FAMILIES, or "mixed" (per row)
    draft_family: str  # same, or "one_hot" for draft_probs=None (point-mass draft on the candidates)
    draft_mode: str  # how drafts are chosen: a name in DRAFT_MODES, or "mixed" (per row)
    seed: int
    verify_lens: Optional[Tuple[int, ...]] = None  # per row in [1, gamma+1]; None = no cap
    greedy: Optional[Tuple[bool, ...]] = None  # per-row greedy mask for mixed batches; None = none
    dtype: str = "float64"  # probabilities, coins and noise: "float64" or "float32"
    temperature: float = 1.0  # the target's sampling settings; target_probs is their law
    top_k: int = 0
    top_p: float = 1.0


@dataclass(frozen=True)
class ValueCase:
    """A verify batch given by its values, so a counterexample shows them and Hypothesis shrinks them.

    Target logits are small integers (exact ties are common; the target law is their softmax), draft rows are
    eighths (the counts of 8 hits per row; None: a one-hot draft), coins sixteenths; drafts may be any id in
    [0, V). The resample noise is flat (1s), so a draw picks the likeliest token of the residual, lowest id first.
    """

    vocab: int
    gamma: int
    candidates: Tuple[Tuple[int, ...], ...]  # [bs][gamma+1]
    logits: Tuple[Tuple[Tuple[int, ...], ...], ...]  # [bs][gamma+1][V]
    draft_eighths: Optional[Tuple[Tuple[Tuple[int, ...], ...], ...]]  # [bs][gamma][V], each row sums to 8
    coins_sixteenths: Tuple[Tuple[int, ...], ...]  # [bs][gamma] in 0..15
    verify_lens: Optional[Tuple[int, ...]] = None
    greedy: Optional[Tuple[bool, ...]] = None

    @property
    def bs(self) -> int:
        return len(self.candidates)

    @property
    def seed(self) -> int:  # the engine's own randomness (sample_block) is keyed by the values
        return hash((self.candidates, self.logits)) & 0x7FFFFFFF


@dataclass(frozen=True)
class DyadicCase:
    """Probabilities and coins on a dyadic grid, every value drawn: target and draft rows in eighths (the counts of
    8 hits per row), coins in sixteenths, so ``u * q(d)`` and ``p(d)`` compare exactly in any float dtype and exact
    ties ``u * q(d) == p(d)`` are common; drafts are any id in [0, V)."""

    vocab: int
    gamma: int
    candidates: Tuple[Tuple[int, ...], ...]  # [bs][gamma+1]
    target_eighths: Tuple[Tuple[Tuple[int, ...], ...], ...]  # [bs][gamma+1][V]
    draft_eighths: Optional[Tuple[Tuple[Tuple[int, ...], ...], ...]]  # [bs][gamma][V]; None: one-hot draft (q(d) = 1)
    coins_sixteenths: Tuple[Tuple[int, ...], ...]  # [bs][gamma]
    verify_lens: Optional[Tuple[int, ...]] = None
    dtype: str = "float32"

    @property
    def bs(self) -> int:
        return len(self.candidates)


@dataclass(frozen=True)
class MarkovCase:
    """First-order Markov target and draft over a small vocabulary: ``table[v]`` is the law after token v.

    draft_family "one_hot" is a deterministic draft (verified with draft_probs=None); "target_greedy"
    drafts the target's own argmax continuation.
    """

    bs: int  # independent sequences (exact-law contracts use one)
    vocab: int
    gamma: int
    target_family: str
    draft_family: str
    seed: int
    verify_lens: Optional[Tuple[int, ...]] = None  # per sequence, every step


@dataclass(frozen=True)
class VerifyInputs:
    """One verify call. Rows past a row's verify length, and probability rows of greedy rows, may hold anything."""

    candidates: torch.Tensor  # [bs, gamma+1] int64; col 0 = anchor
    target_logits: torch.Tensor  # [bs, gamma+1, V] float (greedy verify reads only these)
    target_probs: torch.Tensor  # [bs, gamma+1, V] float, rows sum to 1
    draft_probs: Optional[torch.Tensor]  # [bs, gamma, V] float, or None: one-hot draft on the candidates
    coins: torch.Tensor  # [bs, gamma] in [0, 1)
    resample_noise: torch.Tensor  # [bs, V] = 1/Exp(1), finite and > 0
    verify_lens: Optional[torch.Tensor]  # [bs] int64 in [1, gamma+1], or None (= gamma+1)
    greedy_mask: torch.Tensor  # [bs] bool, for mixed_accept
    prefix_lens: torch.Tensor  # [bs] int64 >= 0: committed length before this step
    # The target's sampling settings per row (None: temperature 1, no top-k, no top-p). target_probs is their
    # law of target_logits; an engine that builds its own probabilities from logits and settings uses these.
    temperatures: Optional[torch.Tensor] = None  # [bs] float > 0
    top_k: Optional[torch.Tensor] = None  # [bs] int, 0 = off
    top_p: Optional[torch.Tensor] = None  # [bs] float in (0, 1]

    @property
    def bs(self) -> int:
        return self.candidates.shape[0]

    @property
    def gamma(self) -> int:
        return self.candidates.shape[1] - 1

    @property
    def vocab(self) -> int:
        return self.target_probs.shape[-1]

    @property
    def drafts(self) -> torch.Tensor:
        return self.candidates[:, 1:]

    def lens(self) -> torch.Tensor:
        """Verify lengths L [bs], gamma+1 where there is no cap."""
        if self.verify_lens is None:
            return torch.full((self.bs,), self.gamma + 1, dtype=torch.int64)
        return self.verify_lens.to(torch.int64)

    def sampling_settings(self) -> list:
        """Each row's (temperature, top_k, top_p) as Python numbers; unset fields are 1.0, 0 (no cut) and 1.0."""
        temps = [1.0] * self.bs if self.temperatures is None else [float(t) for t in self.temperatures]
        ks = [0] * self.bs if self.top_k is None else [int(k) for k in self.top_k]
        ps = [1.0] * self.bs if self.top_p is None else [float(p) for p in self.top_p]
        return list(zip(temps, ks, ps))

    def rows(self, index) -> "VerifyInputs":
        """The sub-batch of rows ``index`` (a list or int64 tensor; repeats and reorders allowed)."""
        index = torch.as_tensor(index, dtype=torch.int64)
        return VerifyInputs(**{f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[index]
                               for f in fields(self)})

    def replace(self, **changes) -> "VerifyInputs":
        return VerifyInputs(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **changes})

    @staticmethod
    def cat(parts) -> "VerifyInputs":
        """Concatenate batches of one gamma and vocabulary (all with or all without a cap / draft probs)."""
        parts = list(parts)
        out = {}
        for f in fields(VerifyInputs):
            values = [getattr(p, f.name) for p in parts]
            out[f.name] = None if any(v is None for v in values) else torch.cat(values)
        return VerifyInputs(**out)


@dataclass(frozen=True)
class AcceptResult:
    correct_len: torch.Tensor  # [bs] int: accepted drafts after the cap, in [0, min(gamma, L-1)]
    bonus: torch.Tensor  # [bs] int: the token emitted after them
    cap_trim: torch.Tensor  # [bs] int >= 0: drafts that passed but fell past the cap (raw - correct_len)


@dataclass(frozen=True)
class CommitResult:
    commit_len: torch.Tensor  # [bs] int = correct_len + 1
    new_seq_lens: torch.Tensor  # [bs] int = prefix_lens + commit_len
    out_tokens: torch.Tensor  # [bs, gamma+1] int: accepted drafts, the bonus, then -1


@dataclass(frozen=True)
class VerifyResult:
    """Both halves of one verify step, as the contracts read them."""

    accept: AcceptResult
    commit: CommitResult

    def __getattr__(self, name):  # result.correct_len, result.out_tokens, ...
        for half in ("accept", "commit"):
            obj = object.__getattribute__(self, half)
            if hasattr(obj, name):
                return getattr(obj, name)
        raise AttributeError(name)


@dataclass(frozen=True)
class AcceptDistributions:
    """What an engine's sampling accept compares: the target law per verify row and the draft law per draft."""

    target_probs: torch.Tensor  # [bs, gamma+1, V] as the accept test and residual read it
    draft_probs: Optional[torch.Tensor]  # [bs, gamma, V]; None for a one-hot (point-mass) draft


class VerifyLevel(Protocol):
    """Conversions only. Capability ``verify``: greedy_accept, finalize, sample_block.
    Capability ``verify.injected-noise`` adds sampling_accept and mixed_accept."""

    def greedy_accept(self, inputs: VerifyInputs) -> AcceptResult: ...  # reads candidates, target_logits, verify_lens
    def sampling_accept(self, inputs: VerifyInputs) -> AcceptResult: ...  # coins and resample_noise as given
    def mixed_accept(self, inputs: VerifyInputs) -> AcceptResult: ...  # greedy where greedy_mask, else sampling
    def finalize(self, inputs: VerifyInputs, accept: AcceptResult) -> CommitResult: ...  # reads prefix_lens, drafts
    # Chain sampling with the engine's own randomness, a function of (inputs, seed) only; coins and
    # resample_noise are ignored. Same inputs and seed must give the same result.
    def sample_block(self, inputs: VerifyInputs, seed: int) -> AcceptResult: ...
    # Capability verify.distributions: the laws the engine's own sampling accept builds from the inputs
    # (target_logits with temperatures/top_k/top_p; the drafts' law), recorded as the accept reads them.
    def accept_distributions(self, inputs: VerifyInputs) -> AcceptDistributions: ...


class MixedBatchLevel(Protocol):
    """Capability ``verify.mixed-batches``: greedy and sampled requests in one batch, and the same requests over
    consecutive steps, as the engine's runner batches them (its own randomness, seeded per request by ``seed``)."""

    # Greedy rows (greedy_mask) and sampled rows in one call; a function of (inputs, seed) only.
    def mixed_block(self, inputs: VerifyInputs, seed: int) -> AcceptResult: ...
    # One call per step for the same requests (bs, greedy_mask and sampling settings from the first step; each
    # step's prefix_lens place it), in one request state: whatever the engine carries between steps, it carries.
    # The first step is mixed_block(steps[0], seed). One AcceptResult per step.
    def consecutive_blocks(self, steps, seed: int) -> list: ...


@dataclass(frozen=True)
class RequestVerifyRow:
    """One greedy request in a verify batch, by its values. `output` is what it has emitted (the last token is the
    anchor this block was drafted from); `logits[j]` are the target's raw logits after prompt + output + drafts[:j],
    small integers, so the oracle's ties and the engine's are the same ties. Rows are ragged: each verifies its own
    number of drafts (0 .. gamma)."""

    request: RequestSpec  # greedy
    output: Tuple[int, ...]
    drafts: Tuple[int, ...]
    logits: Tuple[Tuple[int, ...], ...]  # [len(drafts) + 1][V]


@dataclass(frozen=True)
class RequestVerifyCase:
    vocab: int
    gamma: int  # the block's width: every row was drafted gamma tokens and verifies its first len(drafts)
    rows: Tuple[RequestVerifyRow, ...]


class RequestVerifyLevel(Protocol):
    # Each row's emitted tokens: the drafts accepted, then one token (the correction, or the bonus when every draft
    # is accepted), before any stop rule (the engine's scheduler applies stops after the verify).
    def verify_requests(self, case: RequestVerifyCase) -> list: ...
