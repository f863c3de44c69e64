"""DP/MoE metadata bugs, the first of them the historical scaled `original_global_num_tokens_cpu`."""

import torch

from dspark import dspark_draft, forward_batch_info, spec_info
from dspark.dspark_draft import DraftBlockProposer

from . import Mutant

_real_fill = DraftBlockProposer._fill_dp_moe_sync_metadata
_real_scale = spec_info.spec_scale_global_num_tokens
_real_init = forward_batch_info.ForwardBatch.init_mlp_sync_metadata


def _after_fill(edit):
    def fill(self, fb, batch):
        _real_fill(self, fb, batch)
        edit(self, fb, batch)
    return fill


def _original_scaled(self, fb, batch):
    if fb.original_global_num_tokens_cpu is not None:
        fb.original_global_num_tokens_cpu = list(fb.global_num_tokens_cpu)


def _scale_by_verify_width(si, g, gl):  # T = gamma+1 instead of the draft width Q
    class Wider:
        num_tokens_per_req = si.num_tokens_per_req + 1
        num_tokens_for_logprob_per_req = si.num_tokens_for_logprob_per_req + 1
    return _real_scale(Wider, g, gl)


def _scales_twice(self, fb, batch):
    if fb.global_num_tokens_cpu is not None and batch.dp_spec_prefill_coordination_applied:
        q = self.query_token_num
        fb.global_num_tokens_cpu = [c * q for c in fb.global_num_tokens_cpu]
        fb.global_num_tokens_gpu = torch.tensor(fb.global_num_tokens_cpu, dtype=torch.int64)


def _counts_requests_not_tokens(self, fb, batch):
    fb.num_token_non_padded_cpu = fb.batch_size
    if fb.global_num_token_non_padded_cpu is not None and fb.original_global_num_tokens_cpu is not None:
        fb.global_num_token_non_padded_cpu = fb.batch_size


def _flags_only_on_dp_path(self, fb, batch):
    if not (self._dp_moe_sync and batch.global_num_tokens is not None):
        fb.can_run_decode_cuda_graph = False
        fb.is_extend_in_batch = False


def _dense_draft_writes_counts(self, fb, batch):
    if not self._dp_moe_sync and batch.global_num_tokens is not None:
        fb.original_global_num_tokens_cpu = batch.global_num_tokens


def _init_forgets_to_scale(self, batch, device="cpu", is_draft_worker=False):
    saved, self.spec_info = self.spec_info, None
    try:
        _real_init(self, batch, device, is_draft_worker)
    finally:
        self.spec_info = saved


def _drop_idle_ranks(si, g, gl):
    scaled, scaled_lp = _real_scale(si, g, gl)
    return [c for c in scaled if c], [c for c in scaled_lp if c]


def _pad_each_rank(si, g, gl):
    scaled, scaled_lp = _real_scale(si, g, gl)
    return [c + 1 for c in scaled], [c + 1 for c in scaled_lp]


def _set_fill(edit):
    return lambda mp: mp.setattr(DraftBlockProposer, "_fill_dp_moe_sync_metadata", _after_fill(edit))


def _set_scale(fn):
    def patch(mp):
        mp.setattr(spec_info, "spec_scale_global_num_tokens", fn)
        mp.setattr(dspark_draft, "spec_scale_global_num_tokens", fn)
        mp.setattr(forward_batch_info, "spec_scale_global_num_tokens", fn)
    return patch


def _local_count_uncapped(global_count, num_tokens_per_dp, attn_tp_size, attn_tp_rank):
    chunk = num_tokens_per_dp // attn_tp_size
    return max(global_count - chunk * attn_tp_rank, 0)  # not capped at the rank's chunk


MUTANTS = [
    Mutant("local-token-count-not-capped-at-chunk", ("DPSYNC-008",),
           lambda mp: mp.setattr(forward_batch_info, "local_num_token_non_padded", _local_count_uncapped)),
    Mutant("original-counts-scaled", ("DPSYNC-001",), _set_fill(_original_scaled)),
    Mutant("scaled-by-verify-width", ("DPSYNC-002", "DPSYNC-007"),
           lambda mp: mp.setattr(dspark_draft, "spec_scale_global_num_tokens", _scale_by_verify_width)),
    Mutant("coordinated-counts-scaled-twice", ("DPSYNC-003",), _set_fill(_scales_twice)),
    Mutant("non-padded-counts-requests", ("DPSYNC-004",), _set_fill(_counts_requests_not_tokens)),
    Mutant("graph-flags-only-on-dp-path", ("DPSYNC-005",), _set_fill(_flags_only_on_dp_path)),
    Mutant("dense-draft-writes-dp-counts", ("DPSYNC-006",), _set_fill(_dense_draft_writes_counts)),
    Mutant("init-mlp-sync-forgets-to-scale", ("DPSYNC-007",),
           lambda mp: mp.setattr(forward_batch_info.ForwardBatch, "init_mlp_sync_metadata", _init_forgets_to_scale)),
    Mutant("scaling-drops-idle-ranks", ("SCALE-001",), _set_scale(_drop_idle_ranks)),
    Mutant("scaling-pads-each-rank", ("SCALE-001",), _set_scale(_pad_each_rank)),
]


# ---- DP padding (dspark.dp_padding): the adapter looks its functions up at call time ----

from dspark import dp_padding  # noqa: E402

_real_agree = dp_padding.agree
_real_plan = dp_padding.local_plan


def _counts_in_reverse_rank_order(rank, plans, microbatches):
    p = _real_agree(rank, plans, microbatches)
    return dp_padding.Padding(p.padded_tokens, tuple(reversed(p.rank_padded_tokens)), p.graph, p.microbatched)


def _last_rank_forgotten(rank, plans, microbatches):  # the shared count is the max over every rank but the last
    p = _real_agree(rank, plans, microbatches)
    if not (p.graph or p.microbatched) or len(plans) < 2:
        return p
    head = [q.graph_tokens if p.graph else q.tokens for q in plans[:-1]]
    counts = tuple([max(head)] * len(plans))
    return dp_padding.Padding(counts[rank], counts, p.graph, p.microbatched)


def _graph_decided_by_rank_zero(rank, plans, microbatches):
    if plans[0].graph_tokens is None:
        return _real_agree(rank, plans, microbatches)
    shared = max(q.tokens for q in plans)
    sizes = [q.graph_tokens for q in plans if q.graph_tokens is not None]
    shared = min((g for g in sizes if g >= shared), default=shared)
    counts = tuple([shared] * len(plans))
    return dp_padding.Padding(counts[rank], counts, True, False)


def _graph_one_size_up(tokens, graph_sizes, microbatches, threshold):  # the smallest size > tokens, not >=
    plan = _real_plan(tokens, graph_sizes, microbatches, threshold)
    return dp_padding.RankPlan(plan.tokens, dp_padding.graph_size(tokens + 1, list(graph_sizes)), plan.wants_microbatch)


def _empty_last_microbatch_allowed(tokens, shared, microbatches):
    return True


def _padded_without_lockstep(rank, plans, microbatches):
    p = _real_agree(rank, plans, microbatches)
    top = max(p.rank_padded_tokens)
    return dp_padding.Padding(top, tuple([top] * len(plans)), p.graph, p.microbatched)


PADDING_MUTANTS = [
    Mutant("dp-padded-counts-in-reverse-rank-order", ("DPPAD-001",),
           lambda mp: mp.setattr(dp_padding, "agree", _counts_in_reverse_rank_order)),
    Mutant("dp-padding-forgets-the-last-rank", ("DPPAD-002",),
           lambda mp: mp.setattr(dp_padding, "agree", _last_rank_forgotten)),
    Mutant("dp-graph-replay-decided-by-rank-zero", ("DPPAD-003",),
           lambda mp: mp.setattr(dp_padding, "agree", _graph_decided_by_rank_zero)),
    Mutant("dp-graph-size-one-up", ("DPPAD-003",), lambda mp: mp.setattr(dp_padding, "local_plan", _graph_one_size_up)),
    Mutant("dp-microbatch-with-an-empty-last-part", ("DPPAD-004",),
           lambda mp: mp.setattr(dp_padding, "last_microbatch_has_tokens", _empty_last_microbatch_allowed)),
    Mutant("dp-padded-without-lockstep", ("DPPAD-005",),
           lambda mp: mp.setattr(dp_padding, "agree", _padded_without_lockstep)),
]
MUTANTS = MUTANTS + PADDING_MUTANTS
