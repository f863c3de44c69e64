"""DP-metadata level: the draft forward batch's DP/MoE sync fields, count scaling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Tuple

# Fields a fill may write, under SGLang 0.5.23's names.
COUNT_FIELDS = (
    "original_global_num_tokens_cpu",
    "global_num_tokens_cpu",
    "global_num_tokens_gpu",
    "global_num_tokens_for_logprob_cpu",
    "global_num_tokens_for_logprob_gpu",
)
NON_PADDED_FIELDS = (
    "num_token_non_padded",
    "num_token_non_padded_cpu",
    "global_num_token_non_padded",
    "global_num_token_non_padded_cpu",
)
FLAG_FIELDS = ("can_run_decode_cuda_graph", "is_extend_in_batch", "dp_spec_prefill_coordination_applied")
ALL_FIELDS = COUNT_FIELDS + NON_PADDED_FIELDS + FLAG_FIELDS


@dataclass(frozen=True)
class DpSyncCase:
    bs: int  # local requests (0 = DP-idle rank)
    gamma: int  # draft tokens per block
    sample_from_anchor: bool  # the anchor query row samples too (SGLang's default)
    global_num_tokens: Optional[Tuple[int, ...]]  # per-rank request counts (token counts if coordination applied)
    global_num_tokens_for_logprob: Optional[Tuple[int, ...]]
    dp_moe_sync: bool  # MoE draft under DP attention
    coordination_applied: bool
    enable_num_token_non_padded: bool
    can_run_decode_cuda_graph: bool
    is_extend_in_batch: bool

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
    num_tokens_per_dp: int  # its width as the DP sync padded it: a multiple of the attention-TP size
    attn_tp_size: int


@dataclass
class DpSyncObservation:
    before: dict  # field -> value (tensors cloned) right before the call
    after: dict
    input_ids_numel: int
    built: bool = True  # False: the engine built no draft forward batch (an idle rank with nothing to sync)


class DpMetadataLevel(Protocol):
    # The draft forward batch as the engine's proposer builds and fills it for one decode step (or for an
    # idle rank's participation); the engine derives Q from gamma and sample_from_anchor itself.
    def fill_draft_dp_metadata(self, case: DpSyncCase) -> DpSyncObservation: ...
    def init_mlp_sync_metadata(self, case: DpSyncCase) -> DpSyncObservation: ...  # the generic fill, draft worker, same inputs
    def scale_global_num_tokens(self, counts, logprob_counts, width: int, logprob_width: int) -> Tuple[list, list]: ...
    def local_num_token_non_padded(self, case: LocalTokensCase) -> list: ...  # per attention-TP rank, in rank order
