"""DP-padding level on vLLM's V2 model runner (vllm 0.33.0): each DP rank's step through
`vllm/v1/worker/gpu/dp_utils.py::dispatch_cg_and_sync_dp` -> `sync_cudagraph_and_dp_padding`, as
`GPUModelRunner.execute_model` calls it, on real gloo rank processes (started by the launcher, `contracts.launcher`),
so the collective is vLLM's own `get_dp_group().cpu_all_reduce_`.

Per rank and step: a busy rank's step is a batch with a prefill (`execute_model` then passes no uniform decode count
and max_query_len None; its shape does not otherwise enter the padding); a DP-idle rank runs what the V2 worker's
`execute_dummy_batch` runs, `_dummy_run(uniform_decode_query_len, uniform_decode=True)`: one request of 1 + draft tokens, a uniform decode
(`get_uniform_decode_token_count` of the dummy batch). Each rank's own `CudaGraphManager` (built through its
constructor from the case's capture sizes, cudagraph mode FULL or NONE) dispatches its batch, the sync all-reduces
(tokens, graph mode, uniform count, max query length, microbatch wish, requests, skip-drafts) and every rank
re-dispatches at the agreed count.

Substituted (what it can hide):
* graph capture: no CUDA graph can be captured on a CPU, so after the manager built its candidate descriptors the
  adapter marks them captured (`_graphs_captured = True`; the platform's global graph pool, a CUDA memory pool, is a
  placeholder object); `dispatch` then matches as after a real capture. Hides: a capture that fails or skips a size
  (dispatch would then pick eager on that rank only).
* the model runner: the dispatch call's arguments are the ones `execute_model` derives from the scheduler output
  (num_reqs, num_tokens, uniform count, max query length, `allow_ubatching = ubatch_runner is not None`,
  `uniform_decode = uniform count == decode_query_len`, no LoRA, no drafts skipped); hides: a bug in
  `gather_batch_req_state` or in the runner's token padding before the dispatch (PCP, sequence parallelism).
* the `ParallelConfig` (data-parallel size and rank, DBO and its thresholds) is built by the adapter, as a CUDA
  platform leaves it; the manager's `ubatch_runner` is a marker object when the case microbatches (only its presence
  is read by the dispatch path). Hides: a platform's own adjustment of those settings; the UBatchRunner itself.
* the groups: `parallel_state._DP` is vLLM's `GroupCoordinator` over the rank processes' gloo world, `_PP` one
  single-rank coordinator per rank (no pipeline parallelism), both without a device communicator (none on CPU).
"""

from __future__ import annotations

from contracts.boundary.dp import DpPaddingCase, DpPaddingRun
from contracts.strategies.ranks import run_dp_padding


class VLLMDSparkDpPaddingProgram:
    def __init__(self, rank: int, case: DpPaddingCase, comm):
        self.rank, self.case = rank, case

    def run(self):
        from contracts.adapters.vllm_dspark import env

        env.prepare_vllm_dspark_import()
        import torch
        from vllm.config import CUDAGraphMode, ParallelConfig
        from vllm.distributed import parallel_state
        from vllm.v1.worker.gpu import dp_utils
        from vllm.v1.worker.gpu.cudagraph_utils import CudaGraphManager
        from vllm.v1.worker.utils import get_uniform_decode_token_count

        case, world = self.case, self.case.world_size
        parallel = ParallelConfig(data_parallel_size=world, data_parallel_rank=self.rank,
                                  disable_nccl_for_dp_synchronization=True, enable_dbo=case.microbatches > 1,
                                  dbo_decode_token_threshold=case.microbatch_threshold,
                                  dbo_prefill_token_threshold=case.microbatch_threshold)
        config = _vllm_config(case, parallel)
        if parallel_state._DP is None:
            parallel_state._DP = parallel_state.GroupCoordinator(
                group_ranks=[list(range(world))], local_rank=self.rank, torch_distributed_backend="gloo",
                use_device_communicator=False, group_name="dp")
        if parallel_state._PP is None:
            parallel_state._PP = parallel_state.GroupCoordinator(
                group_ranks=[[r] for r in range(world)], local_rank=self.rank, torch_distributed_backend="gloo",
                use_device_communicator=False, group_name="pp")
        query_len = 1 + case.draft_tokens  # the runner's decode_query_len: the anchor and the drafts
        mode = CUDAGraphMode.FULL if case.graph_sizes else CUDAGraphMode.NONE
        ubatch_runner = object() if case.microbatches > 1 else None
        from vllm.platforms import current_platform

        if getattr(current_platform, "_global_graph_pool", None) is None:  # a CUDA memory pool: none on a CPU
            type(current_platform)._global_graph_pool = object()
        manager = CudaGraphManager(config, torch.device("cpu"), mode, query_len, ubatch_runner=ubatch_runner)
        manager._graphs_captured = bool(case.graph_sizes)  # substitute: every candidate counts as captured
        out = []
        for s, row in enumerate(case.steps):
            real = row[self.rank]
            if real == 0:  # Worker.execute_dummy_batch -> _dummy_run(decode_query_len, uniform_decode=True)
                tokens, reqs, longest = query_len, 1, query_len
                uniform = get_uniform_decode_token_count(reqs, tokens, longest, decode_graph_eligible=True)
            else:  # a batch with a prefill: execute_model passes max_query_len None and no uniform count
                tokens, reqs, longest, uniform = real, real, None, None
            desc, sync = dp_utils.dispatch_cg_and_sync_dp(
                manager, reqs, tokens, uniform, world, self.rank, max_query_len=longest, need_eager=False,
                num_active_loras=0, parallel_config=parallel, allow_ubatching=ubatch_runner is not None,
                uniform_decode=uniform == query_len, allow_skip_drafts=False)
            out.append(dict(rank=self.rank, step=s, tokens=tokens, padded_tokens=int(desc.num_tokens),
                            rank_padded_tokens=None if sync is None else [int(x) for x in
                                                                           sync.num_tokens_across_dp.tolist()],
                            graph=desc.cg_mode != CUDAGraphMode.NONE, microbatched=int(desc.num_ubatches) > 1))
        return out


_TEMPLATE = []  # one VllmConfig, built in the parent (seconds) and inherited by the forked ranks


def _vllm_config(case, parallel):
    """The template config (this rank process's copy) with the case's capture sizes and its parallel config."""
    from vllm.config import CUDAGraphMode

    config = _TEMPLATE[0]
    cc = config.compilation_config
    cc.cudagraph_mode = CUDAGraphMode.FULL if case.graph_sizes else CUDAGraphMode.NONE
    cc.cudagraph_capture_sizes = list(case.graph_sizes)
    cc.max_cudagraph_capture_size = max(case.graph_sizes) if case.graph_sizes else 0
    config.parallel_config = parallel
    config.scheduler_config.max_num_seqs = max(max(max(r) for r in case.steps), 1 + case.draft_tokens,
                                               max(case.graph_sizes, default=1))
    return config


def _code_fingerprint() -> tuple:
    """The vLLM functions a rank calls (a monkeypatch in this process, which the forked ranks inherit, changes one)."""
    from vllm.v1.worker import ubatch_utils
    from vllm.v1.worker.gpu import cudagraph_utils, dp_utils

    names = [(m, n, getattr(m, n)) for m in (dp_utils, ubatch_utils, cudagraph_utils) for n, v in sorted(vars(m).items())
             if callable(v)]
    return tuple(names) + tuple(vars(cudagraph_utils.CudaGraphManager).values())


_RUNS: dict = {}  # (case, fingerprint) -> run: contracts share their pinned examples' runs


class VLLMDSparkDpPadding:
    def coordinate_dp_padding(self, case: DpPaddingCase) -> DpPaddingRun:
        if not isinstance(case, DpPaddingCase):
            raise TypeError(f"case: expected a DpPaddingCase, got {type(case).__name__}")
        from contracts.adapters.vllm_dspark import env

        env.prepare_vllm_dspark_import()  # imported before the ranks fork, so they share it
        if not _TEMPLATE:
            from vllm.config import DeviceConfig, VllmConfig

            _TEMPLATE.append(VllmConfig(device_config=DeviceConfig(device="cpu")))
        key = (case, _code_fingerprint())
        if key not in _RUNS:
            if len(_RUNS) > 64:
                _RUNS.clear()
            _RUNS[key] = run_dp_padding(case, VLLMDSparkDpPaddingProgram)
        return _RUNS[key]

