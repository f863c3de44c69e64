"""Ranks level: real DP-attention ranks, one process each, exchanging DP metadata and draft tokens.

A scenario fixes every rank's batch size and verify budget per decode step; the engine
runs it on `world_size` processes and returns what each rank observed at each step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Tuple


@dataclass(frozen=True)
class RankScenario:
    name: str
    world_size: int
    batch_sizes: Tuple[Tuple[int, ...], ...]  # [step][rank] local request counts; 0 = DP-idle rank
    verify_budgets: Tuple[Tuple[Optional[int], ...], ...]  # [step][rank]; None = no budget this step
    gamma: int
    sample_from_anchor: bool  # Q = gamma if True, else gamma + 1
    capture_bs: Tuple[int, ...]  # captured CUDA-graph batch sizes (already normalized)
    max_running_requests: int
    seed: int = 0

    @property
    def draft_width(self) -> int:
        return self.gamma if self.sample_from_anchor else self.gamma + 1


@dataclass(frozen=True)
class RankStep:
    """What one rank held after one decode step (plain data)."""

    rank: int
    step: int
    bs: int
    forward_mode: str  # the draft forward batch's mode: IDLE on an idle rank
    raw_counts: Tuple[int, ...]  # the gathered per-rank request counts
    # The draft forward batch's DP counts, under the DP level's neutral names (contracts.boundary.dp): per rank,
    # the raw request counts, the token counts (host and device copy, as values) and the logprob token counts.
    rank_request_counts: Optional[Tuple[int, ...]]
    rank_token_counts: Optional[Tuple[int, ...]]
    rank_token_counts_device: Optional[Tuple[int, ...]]
    rank_logprob_token_counts: Optional[Tuple[int, ...]]
    graph_bs: Optional[int]  # the CUDA-graph batch-size bucket; None = no graph fits
    local_verify_tier: int  # -1 = no budget
    gathered_verify_tiers: Tuple[int, ...]
    verify_tier: Optional[int]  # the DP verify tier this rank uses
    local_rows: Tuple[Tuple[int, ...], ...]  # draft-buffer rows this rank contributed: (token, src_rank, req, pos)
    gathered_rows: Tuple[Tuple[int, ...], ...]  # real rows this rank holds after the all-gather
    collectives: int  # collectives this rank entered during the step


@dataclass(frozen=True)
class RankRunFailure:
    rank: Optional[int]  # the rank the engine holds at fault
    kind: str  # desync | died | error | timeout | startup
    message: str

    @classmethod
    def of(cls, failure) -> "RankRunFailure":
        """From the launcher's `RankFailure` (contracts.launcher), or any exception with `rank` and `kind`."""
        return cls(failure.rank, failure.kind, str(failure))


@dataclass(frozen=True)
class RanksRun:
    scenario: RankScenario
    ranks: Tuple[Tuple[RankStep, ...], ...]  # [rank][step]; empty when the run failed
    failure: Optional[RankRunFailure]
    timeout_s: float
    wall_s: float


@dataclass(frozen=True)
class TpScenario:
    """One verify step on the ranks of a tensor-parallel group whose inputs differ in the last bits.

    Each rank builds its inputs with `contracts.strategies.ranks.tp_inputs(scenario, rank)`: the same
    candidates, committed lengths and budget everywhere; confidence and target logits perturbed per rank by
    `divergence`, so left alone the ranks would plan and accept differently.
    """

    name: str
    world_size: int
    bs: int
    gamma: int
    vocab: int
    budget: int
    divergence: float
    seed: int = 0


@dataclass(frozen=True)
class TpRankResult:
    rank: int
    local_verify_lens: Tuple[int, ...]  # what the rank planned from its own inputs, before any sync
    verify_lens: Tuple[int, ...]  # what it verified with
    correct_len: Tuple[int, ...]
    bonus: Tuple[int, ...]
    cap_trim: Tuple[int, ...]
    commit_len: Tuple[int, ...]
    new_seq_lens: Tuple[int, ...]

    @classmethod
    def of(cls, rank: int, local, lens, correct, bonus, trim, commit, new_seq) -> "TpRankResult":
        """From a rank's tensors (or sequences) of ints, in field order."""
        ints = lambda t: tuple(int(x) for x in (t.tolist() if hasattr(t, "tolist") else t))  # noqa: E731
        return cls(int(rank), *(ints(t) for t in (local, lens, correct, bonus, trim, commit, new_seq)))


@dataclass(frozen=True)
class TpRun:
    scenario: TpScenario
    ranks: Tuple[TpRankResult, ...]  # empty when the run failed
    failure: Optional[RankRunFailure]


class RanksLevel(Protocol):
    def run_rank_scenario(self, scenario: RankScenario) -> RanksRun: ...  # runs world_size rank processes


class TpRanksLevel(Protocol):
    def run_tp_scenario(self, scenario: TpScenario) -> TpRun: ...  # world_size rank processes, one TP group


# ---- every verify mode and step kind on real DP ranks, idle ranks included (capability ranks.steps) ----

VERIFY_MODES = ("static", "cap-accept", "compact")
# What a DP group runs at a step: a local prefill, a decode step (draft, then verify), the first decode of requests
# that joined through a PD handoff, or nothing on any rank. A rank without requests is idle at any of them.
STEP_KINDS = ("prefill", "decode", "handoff", "idle")
VERIFY_KINDS = ("decode", "handoff")  # the kinds whose step runs a target verify


@dataclass(frozen=True)
class RankStepsCase:
    """A DP group's steps, run once in each of `verify_modes` (a fresh engine per mode, one launch for all)."""

    world_size: int
    verify_modes: Tuple[str, ...]
    gamma: int
    kinds: Tuple[str, ...]  # [step]
    batch_sizes: Tuple[Tuple[int, ...], ...]  # [step][rank] requests; 0 = idle rank
    prompt_lens: Tuple[Tuple[Tuple[int, ...], ...], ...]  # [step][rank][request] at a prefill step; () elsewhere
    capture_bs: Tuple[int, ...]  # captured batch sizes; the verify's graph token sizes are these x (gamma + 1); () none
    budget_frac: Optional[float]  # the ragged modes' forced verify budget fraction; None: the engine's own budget
    sample_from_anchor: bool = True
    seed: int = 0

    @property
    def draft_width(self) -> int:
        return self.gamma if self.sample_from_anchor else self.gamma + 1

    @property
    def schedule(self) -> Tuple[Tuple[str, int], ...]:
        """(verify mode, step) of each step the ranks run, in order: every step in the first mode, then the next."""
        return tuple((m, s) for m in self.verify_modes for s in range(len(self.kinds)))


@dataclass(frozen=True)
class RankStepView:
    """What one rank held after one step (plain data). Rows are (token, src_rank, req, pos)."""

    rank: int
    step: int  # the index into the case's steps (the run's own step is its index in `schedule`)
    verify_mode: str
    kind: str
    bs: int
    forward_mode: str  # the step's first forward: EXTEND at a prefill, the draft's forward otherwise, IDLE when idle
    request_counts: Tuple[int, ...]  # the gathered per-rank request counts
    forward_token_counts: Tuple[int, ...]  # the forward batch's per-rank token counts (the gather buffer sizes)
    forward_rows: Tuple[Tuple[int, ...], ...]  # the rows this rank contributed to the forward's gather
    forward_gathered: Tuple[Tuple[int, ...], ...]  # the real rows it holds after that gather
    verify_lens: Tuple[int, ...]  # per request; () when the step runs no verify
    verify_tokens: int  # the real rows of this rank's verify forward
    rank_verify_tokens: Tuple[int, ...]  # every rank's real verify rows, as this rank holds them
    padded_verify_tokens: int  # the verify rows this rank runs once the ranks agree
    rank_padded_verify_tokens: Tuple[int, ...]
    verify_graph: bool  # the verify replays a captured graph
    verify_rows: Tuple[Tuple[int, ...], ...]  # (candidate token, src_rank, req, pos in the request's window)
    verify_gathered: Tuple[Tuple[int, ...], ...]
    correct_len: Tuple[int, ...]  # accepted drafts per request
    commit_len: Tuple[int, ...]
    collectives: int


@dataclass(frozen=True)
class RankStepsRun:
    case: RankStepsCase
    ranks: Tuple[Tuple[RankStepView, ...], ...]  # [rank][index in case.schedule]; empty when the run failed
    failure: Optional[RankRunFailure]
    timeout_s: float


class RankStepsLevel(Protocol):
    rank_verify_modes: Tuple[str, ...]  # the verify modes and step kinds its ranks run (a subset of the above)
    rank_step_kinds: Tuple[str, ...]

    def run_rank_steps(self, case: RankStepsCase) -> RankStepsRun: ...  # world_size rank processes
