from __future__ import annotations

import torch

from contracts.boundary.graph import GraphCase, GraphObservation
from dspark import graph_buckets, graph_runner
from dspark.dspark_draft import make_draft_block_spec_info
from dspark.forward_batch_info import ForwardBatch
from dspark.schedule_batch import ForwardMode


class ReferenceGraph:
    def graph_default_capture_bs(self, max_bs: int) -> tuple:
        return tuple(graph_buckets.default_capture_bs(max_bs))

    def graph_admission(self, case: GraphCase) -> GraphObservation:
        width = graph_runner.runner_width(case.runner, case.gamma, case.sample_from_anchor)
        runner = graph_runner.DecodeGraphRunner(case.capture_bs, case.max_running_requests, width,
                                                dp_attention=case.rank_counts is not None,
                                                dp_local=case.runner == "draft" and not case.draft_is_moe)
        bs = case.local_bs
        ids = torch.zeros(bs * case.batch_width, dtype=torch.int64)
        fb = ForwardBatch(forward_mode=ForwardMode.TARGET_VERIFY if bs else ForwardMode.IDLE, batch_size=bs, input_ids=ids,
                          req_pool_indices=torch.arange(bs), seq_lens=torch.full((bs,), 7), out_cache_loc=None,
                          seq_lens_sum=7 * bs, spec_info=make_draft_block_spec_info(case.batch_width))
        if case.rank_counts is not None:
            fb.original_global_num_tokens_cpu = list(case.rank_counts)
            fb.can_run_decode_cuda_graph = case.can_run_vote
        obs = dict(captured_bs=tuple(runner.capture_bs), captured_width=runner.captured_req_width)
        try:
            if not runner.can_run_graph(fb):
                return GraphObservation(admitted=False, **obs)
            replay = runner.load_batch(fb)
        except Exception as e:
            return GraphObservation(admitted=False, error=f"{type(e).__name__}: {e}", **obs)
        return GraphObservation(admitted=True, replay_bs=replay.bs, replay_tokens=replay.num_tokens, raw_bs=replay.raw_bs,
                                **obs)
