"""DP-metadata level: the draft forward batch's DP/MoE sync fields, count scaling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Tuple

# What a fill may write, under engine-neutral names (an adapter maps its engine's fields onto them):
# per DP rank, the raw request counts and the token counts (host and device copies, also for logprobs); this
# rank's non-padded token count and the global one (host int, device scalar); the graph and batch flags.
COUNT_FIELDS = (
    "rank_request_counts",
    "rank_token_counts",
    "rank_token_counts_device",
    "rank_logprob_token_counts",
    "rank_logprob_token_counts_device",
)
NON_PADDED_FIELDS = (
    "non_padded_tokens_device",
    "non_padded_tokens",
    "global_non_padded_tokens_device",
    "global_non_padded_tokens",
)
FLAG_FIELDS = ("graph_replay_allowed", "extend_in_batch", "prefill_coordination_applied")
ALL_FIELDS = COUNT_FIELDS + NON_PADDED_FIELDS + FLAG_FIELDS


@dataclass(frozen=True)
class DpSyncCase:
    bs: int  # local requests (0 = DP-idle rank)
    gamma: int  # draft tokens per block
    sample_from_anchor: bool  # the anchor query row samples too (SGLang's default)
    rank_counts: Optional[Tuple[int, ...]]  # per-rank request counts (token counts if coordination applied)
    rank_logprob_counts: Optional[Tuple[int, ...]]
    moe_dp_sync: bool  # MoE draft under DP attention: its counts are synced across DP ranks
    prefill_coordination_applied: bool  # the prefill/decode coordination already wrote token counts
    device_non_padded_count: bool  # the engine keeps the non-padded count as a device scalar too
    graph_replay_allowed: bool  # the batch may replay a captured decode graph
    extend_in_batch: bool  # some DP rank runs an extend (prefill) batch

    @property
    def draft_width(self) -> int:
        """Q, the draft forward's tokens per request, by the algorithm's definition (for contracts, not adapters)."""
        return self.gamma if self.sample_from_anchor else self.gamma + 1


@dataclass(frozen=True)
class ScalingCase:
    counts: Tuple[int, ...]
    other_counts: Tuple[int, ...]  # same length, for the linearity check
    width: int
    logprob_width: int


@dataclass(frozen=True)
class LocalTokensCase:
    global_count: int  # a DP rank's non-padded tokens
    rank_width: int  # its token width as the DP sync padded it: a multiple of the attention-TP size
    attn_tp_size: int


@dataclass
class DpSyncObservation:
    before: dict  # field -> value (tensors cloned) right before the call
    after: dict
    num_tokens: int  # tokens in the draft forward batch the engine built
    built: bool = True  # False: the engine built no draft forward batch (an idle rank with nothing to sync)


class DpMetadataLevel(Protocol):
    # The draft forward batch as the engine's proposer builds and fills it for one decode step (or for an
    # idle rank's participation); the engine derives Q from gamma and sample_from_anchor itself.
    def fill_draft_dp_metadata(self, case: DpSyncCase) -> DpSyncObservation: ...
    def fill_scheduler_dp_metadata(self, case: DpSyncCase) -> DpSyncObservation: ...  # the generic fill, draft worker, same inputs
    def scale_rank_counts(self, counts, logprob_counts, width: int, logprob_width: int) -> Tuple[list, list]: ...
    def local_non_padded_tokens(self, case: LocalTokensCase) -> list: ...  # per attention-TP rank, in rank order


# DP padding: before a step's forward the DP ranks agree how many tokens each runs. Ranks that run in lockstep
# (replaying captured graphs, or splitting the step into microbatches) must run the same count.
@dataclass(frozen=True)
class DpPaddingCase:
    steps: Tuple[Tuple[int, ...], ...]  # [step][rank] real tokens the rank scheduled (0 = a DP-idle rank)
    graph_sizes: Tuple[int, ...]  # captured graph token sizes, strictly increasing; () = no graphs
    microbatches: int  # 1 = off; n > 1 = a rank may split its step into n microbatches (all ranks or none)
    microbatch_threshold: int  # a rank asks to microbatch when its forward holds at least this many tokens
    draft_tokens: int  # draft tokens per request (an engine's dummy step for an idle rank may depend on it)

    @property
    def world_size(self) -> int:
        return len(self.steps[0])


@dataclass(frozen=True)
class DpPaddingRank:
    """What one rank decided for one step."""

    rank: int
    step: int
    tokens: int  # tokens its forward holds before DP padding: the real ones, or its dummy step's when idle
    padded_tokens: int  # tokens it runs after DP padding
    rank_padded_tokens: Optional[Tuple[int, ...]]  # the per-rank padded counts it holds, in rank order
    graph: bool  # it replays a captured graph
    microbatched: bool  # it splits the step into microbatches


@dataclass(frozen=True)
class DpPaddingRun:
    case: DpPaddingCase
    ranks: Tuple[Tuple[DpPaddingRank, ...], ...]  # [rank][step]; empty when the run failed
    failure: Optional[str]  # which rank failed and how
    wall_s: float = 0.0


class DpPaddingLevel(Protocol):
    def coordinate_dp_padding(self, case: DpPaddingCase) -> DpPaddingRun: ...  # every rank, every step
