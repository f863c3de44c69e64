"""The per-forward batch and its DP/MoE sync metadata.

Mirrors `sglang/srt/model_executor/forward_batch_info.py`. Two units travel
side by side under DP attention and must not be confused:
`original_global_num_tokens_cpu` holds raw per-rank *request* counts (CUDA-graph
admission), `global_num_tokens_*` hold *token* counts (gather buffer sizes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import torch

from dspark import _validate
from dspark.schedule_batch import ForwardMode
from dspark.spec_info import SpecInput, spec_scale_global_num_tokens

# The DP fields a metadata fill may write; contracts compare them before/after.
DP_SYNC_FIELDS = (
    "original_global_num_tokens_cpu",
    "global_num_tokens_cpu",
    "global_num_tokens_gpu",
    "global_num_tokens_for_logprob_cpu",
    "global_num_tokens_for_logprob_gpu",
    "num_token_non_padded",
    "num_token_non_padded_cpu",
    "global_num_token_non_padded",
    "global_num_token_non_padded_cpu",
    "can_run_decode_cuda_graph",
    "can_run_dp_draft_cuda_graph",
    "is_extend_in_batch",
    "dp_spec_prefill_coordination_applied",
)


@dataclass
class ForwardBatch:
    forward_mode: ForwardMode
    batch_size: int
    input_ids: torch.Tensor
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor
    out_cache_loc: Optional[torch.Tensor]
    seq_lens_sum: int
    positions: Optional[torch.Tensor] = None
    spec_info: Optional[SpecInput] = None
    is_extend_in_batch: bool = False
    dp_spec_prefill_coordination_applied: bool = False
    can_run_decode_cuda_graph: bool = False
    can_run_dp_draft_cuda_graph: bool = False
    original_global_num_tokens_cpu: Optional[List[int]] = None
    global_num_tokens_cpu: Optional[List[int]] = None
    global_num_tokens_gpu: Optional[torch.Tensor] = None
    global_num_tokens_for_logprob_cpu: Optional[List[int]] = None
    global_num_tokens_for_logprob_gpu: Optional[torch.Tensor] = None
    num_token_non_padded: Optional[torch.Tensor] = None
    num_token_non_padded_cpu: Optional[int] = None
    global_num_token_non_padded: Optional[torch.Tensor] = None
    global_num_token_non_padded_cpu: Optional[int] = None

    def init_mlp_sync_metadata(self, batch, device: str | torch.device = "cpu", is_draft_worker: bool = False) -> None:
        """Fill the DP/MLP-sync counts from the scheduler batch (SGLang C2).

        Source: the batch's counts, or the draft's own counts on a draft worker
        unless prefill coordination already rewrote them. Scaled by the spec
        input's per-request width unless coordination already wrote tokens.
        """
        applied = batch.dp_spec_prefill_coordination_applied
        source, source_lp = batch.global_num_tokens, batch.global_num_tokens_for_logprob
        if is_draft_worker and batch.draft_global_num_tokens is not None and not applied:
            source, source_lp = batch.draft_global_num_tokens, batch.draft_global_num_tokens_for_logprob
        if source is not None:
            source = _validate.count_list("global_num_tokens", source)
            source_lp = _validate.count_list("global_num_tokens_for_logprob", source if source_lp is None else source_lp)
            _validate.same_ranks(global_num_tokens=source, global_num_tokens_for_logprob=source_lp)
            if self.spec_info is not None and not applied:
                scaled, scaled_lp = spec_scale_global_num_tokens(self.spec_info, source, source_lp)
            else:
                scaled, scaled_lp = list(source), list(source_lp)
        self.dp_spec_prefill_coordination_applied = applied
        if source is None:
            return
        self.original_global_num_tokens_cpu = source
        self.global_num_tokens_cpu = scaled
        self.global_num_tokens_gpu = torch.tensor(scaled, dtype=torch.int64, device=device)
        self.global_num_tokens_for_logprob_cpu = scaled_lp
        self.global_num_tokens_for_logprob_gpu = torch.tensor(scaled_lp, dtype=torch.int64, device=device)
        self.can_run_decode_cuda_graph = batch.can_run_decode_cuda_graph
        self.can_run_dp_draft_cuda_graph = batch.can_run_dp_draft_cuda_graph
        self.is_extend_in_batch = batch.is_extend_in_batch


def local_num_token_non_padded(global_num_token_non_padded: int, num_tokens_per_dp: int, attn_tp_size: int,
                               attn_tp_rank: int) -> int:
    """An attention-TP rank's share of its DP rank's real tokens: the width splits into equal chunks, real tokens
    first (SGLang `compute_local_num_token_non_padded`)."""
    chunk = num_tokens_per_dp // attn_tp_size
    return min(max(global_num_token_non_padded - chunk * attn_tp_rank, 0), chunk)
