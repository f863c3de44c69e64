"""Ranks level on SGLang: a tensor-parallel group's verify step on real gloo rank processes (started by
`contracts.launcher`), each rank with SGLang's own `GroupCoordinator` and `SpecTpSync` (as the worker builds it
over `get_dp_tp_group()`), a real `DSparkVerifyPlanner` whose `schedule_layout` syncs the verify lengths
(`DSPARK_PLAN`), `accept_draft_tokens` and `build_accept_outs`, which syncs the accept results.
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import torch

from contracts.adapters.sglang.planner import verify_planner
from contracts.adapters.sglang.runtime import CPU, runtime
from contracts.boundary.ranks import TpRankResult, TpRun, TpScenario
from contracts.strategies.ranks import run_tp, tp_inputs

# Where the step level's Scheduler holds a process group in this process, ranks fork from the launcher's forkserver;
# its first launch imports SGLang there (about 16 s, more on two loaded cores) before any rank is built.
STARTUP_TIMEOUT_S = 240.0


class SGLangTpProgram:
    PRELOAD = ("contracts.adapters.sglang.rank_preload",)

    def __init__(self, rank: int, scenario: TpScenario, comm):
        self.rank, self.scenario, self.timeout_s = rank, scenario, comm.timeout_s
        runtime()  # before the first collective: the launcher bounds building by its startup timeout

    def run(self):
        from sglang.kernels.ops.speculative.dspark.dspark_schedule import ScheduleVerifyLensTopk
        from sglang.srt.distributed.parallel_state import GroupCoordinator
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2
        from sglang.srt.speculative.dspark_components.dspark_planner import DSparkScheduleConfig
        from sglang.srt.speculative.dspark_components.dspark_verify import accept_draft_tokens, build_accept_outs
        from sglang.srt.speculative.spec_tp_sync import SpecTpSync, SpecTpSyncSite

        s = self.scenario
        conf, cand, logits, prefix = tp_inputs(s, self.rank)
        T = s.gamma + 1
        group = GroupCoordinator(
            group_ranks=[list(range(s.world_size))], local_rank=self.rank, torch_distributed_backend="gloo",
            use_pynccl=False, use_mscclpp=False, use_custom_allreduce=False, use_torch_symm_mem_all_reduce=False,
            use_hpu_communicator=False, use_xpu_communicator=False, group_name="attn_tp",
            gloo_timeout=timedelta(seconds=self.timeout_s))
        sync = SpecTpSync(group)
        conf32 = conf.to(torch.float32)
        local = ScheduleVerifyLensTopk.execute(confidence=conf32, budget=s.budget, cfg=DSparkScheduleConfig(gamma=s.gamma))
        pool = ReqToTokenPool(size=max(s.bs, 1), max_context_len=8, device="cpu", enable_memory_saver=False)
        rows = torch.tensor(pool.alloc_rows(s.bs), dtype=torch.int64)
        with verify_planner(pool, s.gamma, overlap=False, tp_rank=self.rank, tp_sync=sync) as planner:
            layout = planner.schedule_layout(req_pool_indices=rows, prefix_lens=prefix, device=CPU, confidence=conf32,
                                             budget=s.budget)
        correct, bonus, trim = accept_draft_tokens(
            candidates=cand, target_logits=logits.reshape(s.bs * T, -1), draft_block=SimpleNamespace(greedy_mask=None),
            sampling_info=None, draft_input=DFlashDraftInputV2.create_idle_input(device=CPU), gamma=s.gamma,
            verify_num_draft_tokens=T, cutoff_layout=layout)
        out = build_accept_outs(correct_len=correct.clone(), bonus=bonus.clone(), cap_trim_lens=trim.clone(),
                                prefix_lens=prefix, draft_tokens=cand[:, 1:], gamma=s.gamma, verify_num_draft_tokens=T,
                                tp_sync=sync, sync_site=SpecTpSyncSite.DSPARK_ACCEPT_GREEDY)
        return [TpRankResult.of(self.rank, local, layout.verify_lens, out.correct_len, out.bonus, out.cap_trim_lens,
                                out.commit_lens, out.new_seq_lens)]


class SGLangRanks:
    def run_tp_scenario(self, scenario: TpScenario) -> TpRun:
        runtime()  # imported before the ranks fork, so they share it
        return run_tp(scenario, SGLangTpProgram, startup_timeout_s=STARTUP_TIMEOUT_S)
