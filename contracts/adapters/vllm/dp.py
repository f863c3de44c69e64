"""DP-padding level on vLLM: each DP rank's step through the V1 model runner's own batch-execution decision, on real
gloo rank processes (started by the launcher, `contracts.launcher`), so the collective is vLLM's own all-reduce.

Per rank and step, `GPUModelRunner._determine_batch_execution_and_padding` runs as `execute_model` runs it: a real
`CudagraphDispatcher` picks the rank's own graph size and mode, then `dp_utils.coordinate_batch_across_dp` all-reduces
every rank's (tokens, padded tokens, microbatch wish, graph mode) over the DP group's CPU group
(`disable_nccl_for_dp_synchronization`), and the runner re-dispatches at the agreed count. A DP-idle rank runs what
vLLM's engine core runs for it, `Worker.execute_dummy_batch`: a dummy step of `uniform_decode_query_len` tokens
(1 + the draft tokens) through the same decision (`_dummy_run`).

Substituted (what it can hide):
* the model runner: the method runs on a namespace holding the fields it reads (`vllm_config`, `parallel_config`,
  `cudagraph_dispatcher`, `uniform_decode_query_len`, `model_config.is_encoder_decoder`, the input batch's LoRA map);
  hides: a bug in how the runner builds those at start-up.
* the platform: vLLM's CPU platform turns CUDA graphs and dual-batch overlap off in `VllmConfig`'s post-init, so the
  adapter sets the compilation config's capture sizes and mode (FULL) back before it builds the dispatcher, and
  builds the `ParallelConfig` (data-parallel size and rank, DBO and its thresholds) on its own, as a CUDA platform
  leaves them; hides: a platform's own adjustment of those settings.
* `allow_microbatching` is True (the runner asks `_allow_microbatching`, which reads the batch's block tables);
  hides: a step that vLLM would refuse to split for its prefix writers.
* the DP group: `parallel_state._DP` is vLLM's `GroupCoordinator` over the rank processes' gloo world, built without
  a device communicator (none exists on the CPU).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from contracts.boundary.dp import DpPaddingCase, DpPaddingRun
from contracts.strategies.ranks import run_dp_padding


class VLLMDpPaddingProgram:
    def __init__(self, rank: int, case: DpPaddingCase, comm):
        self.rank, self.case = rank, case

    def run(self):
        from contracts.adapters.vllm import env as vllm_env

        vllm_env.prepare_vllm_import()
        from vllm.config import CUDAGraphMode, ParallelConfig
        from vllm.distributed import parallel_state
        from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        case = self.case
        world = case.world_size
        parallel = ParallelConfig(data_parallel_size=world, data_parallel_rank=self.rank,
                                  disable_nccl_for_dp_synchronization=True, enable_dbo=case.microbatches > 1,
                                  dbo_decode_token_threshold=case.microbatch_threshold,
                                  dbo_prefill_token_threshold=case.microbatch_threshold)
        config = _vllm_config(case)
        dispatcher = CudagraphDispatcher(config)
        mode = CUDAGraphMode.FULL if case.graph_sizes else CUDAGraphMode.NONE
        query_len = 1 + case.draft_tokens
        dispatcher.initialize_cudagraph_keys(mode, query_len)
        if parallel_state._DP is None:
            parallel_state._DP = parallel_state.GroupCoordinator(
                group_ranks=[list(range(world))], local_rank=self.rank, torch_distributed_backend="gloo",
                use_device_communicator=False, group_name="dp")
        view = SimpleNamespace(vllm_config=SimpleNamespace(parallel_config=parallel,
                                                           observability_config=config.observability_config),
                               parallel_config=parallel, cudagraph_dispatcher=dispatcher, uniform_decode_query_len=query_len,
                               model_config=SimpleNamespace(is_encoder_decoder=False),
                               input_batch=SimpleNamespace(lora_id_to_lora_request={}),
                               _is_uniform_decode=GPUModelRunner._is_uniform_decode)
        out = []
        for s, row in enumerate(case.steps):
            real = row[self.rank]
            idle = real == 0
            tokens = query_len if idle else real  # Worker.execute_dummy_batch: _dummy_run(uniform_decode_query_len)
            if idle:  # _dummy_run: one request per query_len tokens, a uniform decode batch
                reqs, sched, longest, uniform = 1, [tokens], tokens, True
            else:  # a mixed batch of one-token requests (a busy rank's step; its shape does not enter the padding)
                reqs, sched, longest, uniform = tokens, [1] * tokens, 1, None
            mode_s, desc, ubatch, across, _ = GPUModelRunner._determine_batch_execution_and_padding(
                view, num_tokens=tokens, num_reqs=reqs, num_scheduled_tokens_np=np.array(sched, dtype=np.int32),
                max_num_scheduled_tokens=longest, allow_microbatching=True, force_uniform_decode=uniform)
            out.append(dict(rank=self.rank, step=s, tokens=tokens, padded_tokens=int(desc.num_tokens),
                            rank_padded_tokens=None if across is None else [int(x) for x in across.tolist()],
                            graph=mode_s != CUDAGraphMode.NONE, microbatched=bool(ubatch)))
        return out


_TEMPLATE = []  # one VllmConfig, built in the parent (seconds) and inherited by the forked ranks


def _vllm_config(case):
    """The template config (this rank process's own copy), with the case's graph sizes set back after the CPU
    platform's post-init turned CUDA graphs off."""
    from vllm.config import CUDAGraphMode

    config = _TEMPLATE[0]
    cc = config.compilation_config
    cc.cudagraph_mode = CUDAGraphMode.FULL if case.graph_sizes else CUDAGraphMode.NONE
    cc.cudagraph_capture_sizes = list(case.graph_sizes)
    cc.max_cudagraph_capture_size = max(case.graph_sizes) if case.graph_sizes else None
    return config


def _code_fingerprint() -> tuple:
    """The vLLM functions a rank calls (a monkeypatch in this process, which the forked ranks inherit, changes one)."""
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher
    from vllm.v1.worker import dp_utils, ubatch_utils
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    names = [(m, n, getattr(m, n)) for m in (dp_utils, ubatch_utils) for n, v in sorted(vars(m).items()) if callable(v)]
    return tuple(names) + (GPUModelRunner._determine_batch_execution_and_padding, *vars(CudagraphDispatcher).values())


_RUNS: dict = {}  # (case, fingerprint) -> run: contracts share their pinned examples' runs


class VLLMDpPadding:
    def coordinate_dp_padding(self, case: DpPaddingCase) -> DpPaddingRun:
        from contracts.adapters.vllm import env as vllm_env

        vllm_env.prepare_vllm_import()  # imported before the ranks fork, so they share it
        if not _TEMPLATE:
            from vllm.config import VllmConfig

            _TEMPLATE.append(VllmConfig())
        key = (case, _code_fingerprint())
        if key not in _RUNS:
            if len(_RUNS) > 64:
                _RUNS.clear()
            _RUNS[key] = run_dp_padding(case, VLLMDpPaddingProgram)
        return _RUNS[key]

