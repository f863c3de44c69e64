"""The reference engine's names for the DP level's engine-neutral fields (contracts.boundary.dp): `dspark`'s
ForwardBatch attributes (SGLang's names, which it mirrors) and the scheduler-batch fields they are filled from. The
reference pack keeps its own map: a pack never reads another pack's, so each follows its own engine."""

import copy

FIELD_NAMES = {
    "rank_request_counts": "original_global_num_tokens_cpu",
    "rank_token_counts": "global_num_tokens_cpu",
    "rank_token_counts_device": "global_num_tokens_gpu",
    "rank_logprob_token_counts": "global_num_tokens_for_logprob_cpu",
    "rank_logprob_token_counts_device": "global_num_tokens_for_logprob_gpu",
    "non_padded_tokens_device": "num_token_non_padded",
    "non_padded_tokens": "num_token_non_padded_cpu",
    "global_non_padded_tokens_device": "global_num_token_non_padded",
    "global_non_padded_tokens": "global_num_token_non_padded_cpu",
    "graph_replay_allowed": "can_run_decode_cuda_graph",
    "extend_in_batch": "is_extend_in_batch",
    "prefill_coordination_applied": "dp_spec_prefill_coordination_applied",
}


def dp_fields(fb) -> dict:
    """A copy of every DP field of a ForwardBatch, under the neutral names (None where the batch lacks one: SGLang
    does not declare num_token_non_padded_cpu)."""
    from contracts.boundary.dp import ALL_FIELDS

    return {f: copy.deepcopy(getattr(fb, FIELD_NAMES[f], None)) for f in ALL_FIELDS}


def set_dp_inputs(batch, case) -> None:
    """A scheduler batch's DP inputs from a DpSyncCase, as SGLang's MLP-sync gather sets them."""
    lists = lambda v: None if v is None else list(v)  # noqa: E731
    batch.global_num_tokens = lists(case.rank_counts)
    batch.global_num_tokens_for_logprob = lists(case.rank_logprob_counts)
    batch.dp_spec_prefill_coordination_applied = case.prefill_coordination_applied
    batch.can_run_decode_cuda_graph = case.graph_replay_allowed
    batch.is_extend_in_batch = case.extend_in_batch
