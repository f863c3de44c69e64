"""The DSpark draft block proposer: draft forward batch and its DP/MoE metadata.

Mirrors `sglang/srt/speculative/dspark_components/dspark_draft.py`. The draft
forward has `query_token_num` (Q) tokens per request: `gamma` when the anchor
row also samples (`sample_from_anchor`, the default), else `gamma + 1`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dspark import _validate
from dspark.forward_batch_info import ForwardBatch
from dspark.schedule_batch import ForwardMode
from dspark.spec_info import SpecInput, draft_query_width, spec_scale_global_num_tokens


@dataclass
class DraftBlockSpecInfo(SpecInput):
    """The draft block's spec info (SGLang: a DFlashVerifyInput of width Q).

    Its width is the factor that scales per-rank request counts to tokens.
    """

    draft_token_num: int = 1

    def __post_init__(self):
        _validate.positive_int("draft_token_num", self.draft_token_num)
        self.num_tokens_per_req = self.draft_token_num
        self.num_tokens_for_logprob_per_req = self.draft_token_num


def make_draft_block_spec_info(draft_token_num: int) -> DraftBlockSpecInfo:
    return DraftBlockSpecInfo(draft_token_num=draft_token_num)


@dataclass
class DraftProposal:
    """One draft block per request.

    draft_tokens [bs, gamma] int64: d_1..d_gamma.
    step_logits  [bs, gamma, V] float64: the logits each draft was drawn from (q = softmax(step_logits / T)).
    confidence   [bs, gamma] float64 in [0, 1]: c_k from the hidden row and the token before d_{k+1} only.
    """

    draft_tokens: torch.Tensor
    step_logits: torch.Tensor
    confidence: torch.Tensor


class DraftBlockProposer:
    def __init__(
        self,
        gamma: int,
        *,
        mask_token_id: int = 0,
        sample_from_anchor: bool = True,
        draft_is_moe: bool = False,
        attn_dp_enabled: bool = False,
        enable_num_token_non_padded: bool = False,
        device: str | torch.device = "cpu",
    ):
        self.gamma = _validate.positive_int("gamma", gamma)
        if isinstance(mask_token_id, bool) or not isinstance(mask_token_id, int) or mask_token_id < 0:
            raise ValueError(f"mask_token_id: expected a non-negative int, got {mask_token_id!r}")
        self.mask_token_id = mask_token_id
        self.sample_from_anchor = bool(sample_from_anchor)
        self.device = _validate.device("device", device)
        # Only a MoE draft under DP attention has to agree with its peers on gather sizes.
        self._dp_moe_sync = bool(draft_is_moe and attn_dp_enabled)
        # SGLang keeps one persistent [1] int32 buffer and refills it in place.
        self._num_token_non_padded_buf = (
            torch.zeros(1, dtype=torch.int32, device=self.device) if enable_num_token_non_padded else None
        )
        self.draft_block_spec_info = make_draft_block_spec_info(self.query_token_num)

    @property
    def query_token_num(self) -> int:
        return draft_query_width(self.gamma, self.sample_from_anchor)

    def propose(self, drafter, ctx_tokens, ctx_hiddens, anchors: torch.Tensor, temperatures: torch.Tensor,
                gumbel: torch.Tensor) -> DraftProposal:
        """Draft one block per request over `[anchor, MASK...]` (Q query rows), drawing from the explicit noise.

        ctx_tokens / ctx_hiddens: per request, the committed tokens and the draft
        context (one target hidden per committed position); anchors [bs] int64;
        temperatures [bs] (0 = argmax); gumbel [bs, gamma, V] Gumbel noise.
        """
        _validate.int_tensor("anchors", anchors)
        bs, gamma = int(anchors.shape[0]), self.gamma
        if gumbel.shape[:2] != (bs, gamma):
            raise ValueError(f"gumbel: expected shape [{bs}, {gamma}, V], got {list(gumbel.shape)}")
        tokens, logits, conf = drafter.draft_block(ctx_tokens, ctx_hiddens, anchors.to(torch.int64), gamma,
                                                   temperatures, gumbel, self.query_token_num)
        if tokens.shape != (bs, gamma) or conf.shape != (bs, gamma) or logits.shape[:2] != (bs, gamma):
            raise ValueError(f"drafter: expected [{bs}, {gamma}] drafts and confidences, got {list(tokens.shape)}, "
                             f"{list(conf.shape)}")
        _validate.in_range("drafter: draft tokens", tokens, 0, logits.shape[-1])  # a pluggable drafter's output
        _validate.probabilities("drafter: confidence", conf)
        return DraftProposal(tokens.to(torch.int64), logits, conf)

    def build_draft_forward_batch(self, batch) -> ForwardBatch:
        """The draft forward over `[anchor, MASK...]` per request, DP metadata filled."""
        fb = self.new_draft_forward_batch(batch)
        self._fill_dp_moe_sync_metadata(fb, batch)
        return fb

    def new_draft_forward_batch(self, batch) -> ForwardBatch:
        """The draft ForwardBatch as constructed, before any DP metadata fill."""
        bonus = batch.spec_info.bonus_tokens if batch.spec_info is not None else torch.zeros(0, dtype=torch.int64)
        bs, Q = int(bonus.shape[0]), self.query_token_num
        input_ids = torch.full((bs, Q), self.mask_token_id, dtype=torch.int64, device=self.device)
        input_ids[:, 0] = bonus.to(self.device)
        seq_lens = batch.seq_lens.to(torch.int64)
        return ForwardBatch(
            forward_mode=ForwardMode.IDLE if bs == 0 else ForwardMode.DRAFT_EXTEND,
            batch_size=bs,
            input_ids=input_ids.reshape(-1),
            req_pool_indices=batch.req_pool_indices,
            seq_lens=seq_lens + Q,
            out_cache_loc=None,
            seq_lens_sum=int(seq_lens.sum()) + bs * Q,
            positions=(seq_lens[:, None] + torch.arange(Q)).reshape(-1),
            spec_info=self.draft_block_spec_info,
            global_num_token_non_padded_cpu=bs * Q,
        )

    def run_idle_participation(self, batch) -> ForwardBatch | None:
        """An idle DP rank still joins the draft's collectives with an empty batch."""
        if not self._dp_moe_sync or batch.global_num_tokens is None:
            return None
        empty = torch.zeros(0, dtype=torch.int64, device=self.device)
        fb = ForwardBatch(
            forward_mode=ForwardMode.IDLE, batch_size=0, input_ids=empty, req_pool_indices=empty,
            seq_lens=empty, out_cache_loc=None, seq_lens_sum=0, spec_info=self.draft_block_spec_info,
        )
        self._fill_dp_moe_sync_metadata(fb, batch)
        return fb

    def _fill_dp_moe_sync_metadata(self, forward_batch: ForwardBatch, batch) -> None:
        """Copy the DP/MoE sync metadata from the scheduler batch (SGLang B1-B4).

        Three branches: early return (no DP-MoE sync, or no counts) still sets the
        graph flags and the local non-padded count; with prefill coordination
        applied the counts are already tokens and are copied unscaled; otherwise
        request counts are scaled by Q for the gathers, while
        `original_global_num_tokens_cpu` keeps the raw request counts that
        CUDA-graph admission needs.
        """
        fb = forward_batch
        _validate.int_tensor("forward_batch.input_ids", fb.input_ids)
        counts = batch.global_num_tokens
        sync = self._dp_moe_sync and counts is not None
        if sync:
            counts = _validate.count_list("batch.global_num_tokens", counts)
            lp = batch.global_num_tokens_for_logprob
            lp = counts if lp is None else _validate.count_list("batch.global_num_tokens_for_logprob", lp)
            _validate.same_ranks(global_num_tokens=counts, global_num_tokens_for_logprob=lp)
            applied = batch.dp_spec_prefill_coordination_applied
            if applied:  # coordination already wrote token counts; scaling again would give Q^2
                scaled, scaled_lp = list(counts), list(lp)
            else:
                scaled, scaled_lp = spec_scale_global_num_tokens(self.draft_block_spec_info, counts, lp)

        n = int(fb.input_ids.numel())
        fb.can_run_decode_cuda_graph = batch.can_run_decode_cuda_graph
        fb.is_extend_in_batch = batch.is_extend_in_batch
        fb.dp_spec_prefill_coordination_applied = batch.dp_spec_prefill_coordination_applied
        fb.num_token_non_padded_cpu = n
        if self._num_token_non_padded_buf is not None:
            self._num_token_non_padded_buf.fill_(n)
            fb.num_token_non_padded = self._num_token_non_padded_buf
        if not sync:
            return

        fb.original_global_num_tokens_cpu = batch.global_num_tokens
        fb.global_num_tokens_cpu = scaled
        fb.global_num_tokens_gpu = torch.tensor(scaled, dtype=torch.int64, device=self.device)
        fb.global_num_tokens_for_logprob_cpu = scaled_lp
        fb.global_num_tokens_for_logprob_gpu = torch.tensor(scaled_lp, dtype=torch.int64, device=self.device)
        fb.global_num_token_non_padded_cpu = n
        if self._num_token_non_padded_buf is not None:
            fb.global_num_token_non_padded = torch.tensor(n, dtype=torch.int32, device=self.device)


# ---- the verify window, and the commit of target features into the draft context -----------------


@dataclass
class VerifyWindow:
    """Positions n .. n+T-1 of each request (anchor, then the drafts) and the KV slots its row holds there."""

    positions_2d: torch.Tensor  # [bs, T] int64
    cache_loc_2d: torch.Tensor  # [bs, T] int64


def alloc_verify_window(batch, verify_num_draft_tokens: int) -> VerifyWindow:
    """The window of one decode step, read from the request-to-token rows the step's reservation filled."""
    T = _validate.positive_int("verify_num_draft_tokens", verify_num_draft_tokens)
    table = batch.req_to_token_pool.req_to_token
    _validate.int_tensor("batch.seq_lens", batch.seq_lens, nonnegative=True)
    _validate.int_tensor("batch.req_pool_indices", batch.req_pool_indices)
    _validate.same_length(seq_lens=batch.seq_lens, req_pool_indices=batch.req_pool_indices)
    _validate.in_range("batch.req_pool_indices", batch.req_pool_indices, 0, table.shape[0])
    seq = batch.seq_lens.to(torch.int64)
    cols = seq[:, None] + torch.arange(T)
    rows = batch.req_pool_indices.to(torch.int64)[:, None].expand_as(cols)
    if cols.numel() and int(cols.max()) >= table.shape[1]:
        raise ValueError(f"batch.seq_lens: the verify window reaches column {int(cols.max())} of a {table.shape[1]}-wide row")
    return VerifyWindow(cols, table[rows, cols].to(torch.int64))


def with_verify_window(fb: ForwardBatch, window: VerifyWindow, query_token_num: int) -> ForwardBatch:
    """The draft forward writes its Q rows into the first Q slots of the verify window."""
    if _validate.positive_int("query_token_num", query_token_num) > window.cache_loc_2d.shape[1]:
        raise ValueError(f"query_token_num: {query_token_num} exceeds the verify window width {window.cache_loc_2d.shape[1]}")
    fb.out_cache_loc = window.cache_loc_2d[:, :query_token_num].reshape(-1)
    return fb


@dataclass
class CommitInject:
    loc_2d: torch.Tensor  # [bs, T] the draft-context slot each verify column is written to; -1: not written
    positions_2d: torch.Tensor  # [bs, T]
    rows_2d: torch.Tensor  # [bs, T] the verify row whose target features are written


def commit_inject_layout(window: VerifyWindow, commit_lens: torch.Tensor) -> CommitInject:
    """Target features reach the draft context for exactly the committed columns (col < commit_len)."""
    lens = _validate.int_tensor("commit_lens", commit_lens, nonnegative=True).to(torch.int64)
    bs, T = window.cache_loc_2d.shape
    if lens.shape[0] != bs:
        raise ValueError(f"commit_lens: {lens.shape[0]} lengths for a window of {bs} requests")
    _validate.in_range("commit_lens", lens, 0, T + 1)
    committed = torch.arange(T)[None, :] < lens[:, None]
    loc = torch.where(committed, window.cache_loc_2d, -1)
    return CommitInject(loc, window.positions_2d, torch.arange(bs * T).reshape(bs, T))
