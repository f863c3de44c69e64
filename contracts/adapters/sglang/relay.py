"""Confidence relay level on SGLang: a real `DSparkVerifyPlanner` (cap-accept) with its `HostConfidenceBudgetPlanner`,
a real `FutureMap` with its `ConfidenceRelay`, and a real `ReqToTokenPool` whose `alloc_rows` / `free_rows` move the
row generations. Per step, the scheduler's entry points in its order: `prepare_verify_budget` (overlap), then
`resolve_verify_token_budget`, then after the verify `FutureMap.publish` with the step's confidence (overlap).
Observed: the survival the budget planner hands `compute_verify_token_budget`. Substituted: the draft model and
the model runner (the real pool), and the batch as the fields these entry points read.

A PD decode server's case (`RelayCase.pd_decode`, rows possibly taken before their requests join: RELAY-002; the
pack declares `relay.prealloc`) runs where SGLang runs DSpark's PD decode with the relay's ring, on
overlap_utils' CUDA branch with SGLang's PD decode pool and prebuilt path (contracts.adapters.sglang.relay_cuda_path),
its streams, events and ring copy on the repo's stream model in its eager order (relay_ring_model: the copy is pending
until the next host action; events are recorded, waited on and queried as the model orders them). This CPU's own
branch (the host path) already fails every such case for RELAY-001's cause, so it would show nothing of the pre-allocation.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from contracts.adapters.sglang.planner import verify_planner
from contracts.adapters.sglang.runtime import CPU, runtime
from contracts.boundary.relay import RelayCase, RelayRead
from contracts.patching import patched


class SGLangRelay:
    @property
    def confidence_relay_lag(self) -> int:
        runtime()
        from sglang.srt.environ import envs

        return max(int(envs.SGLANG_DSPARK_CONFIDENCE_RELAY_LAG_STEPS.get()), 1)

    def _relay_planner(self, case: RelayCase, pool):
        with verify_planner(pool, case.gamma, overlap=case.overlap, max_running_requests=case.pool_size) as planner:
            return planner

    def run_confidence_relay(self, case: RelayCase) -> list:
        if case.overlap and (case.pd_decode or any(step.prealloc for step in case.steps)):
            return self._run_on_ring(case)
        return self._run_local(case)

    @staticmethod
    def _run_on_ring(case: RelayCase) -> list:
        """The CUDA branch on the stream model in its eager order (every op done before the host looks again: the
        order the ring is written for); a race or a wait the model finds even there is raised, not ignored."""
        from contracts.adapters.sglang.relay_cuda_path import SGLangCudaRelay
        from contracts.streams import EAGER, StreamModel

        model = StreamModel(EAGER)
        reads = SGLangCudaRelay().run_confidence_relay_on(case, model)
        if model.violations:
            raise RuntimeError(f"SGLang's relay ring under the eager stream order: {model.violations[0]}")
        return reads

    def _run_local(self, case: RelayCase) -> list:
        """Every row taken just before its request's first step (`ReqToTokenPool.alloc_rows`)."""
        rt = runtime()
        from sglang.srt.managers.overlap_utils import FutureMap
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.srt.speculative.dspark_components import dspark_planner
        from sglang.srt.speculative.dspark_components.dspark_draft import make_next_draft_input
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        pool = ReqToTokenPool(size=case.pool_size, max_context_len=8, device="cpu", enable_memory_saver=False)
        planner = self._relay_planner(case, pool)
        fm = FutureMap(CPU, SpeculativeAlgorithm.DSPARK, pool, needs_cpu_seq_lens=True,
                       needs_confidence_relay=case.overlap)
        seen = []
        real = dspark_planner.compute_verify_token_budget

        def recording(*, history_survival_probs, **kw):
            seen.append(history_survival_probs.clone())
            return real(history_survival_probs=history_survival_probs, **kw)

        rows, reads = {}, []
        with patched(dspark_planner, "compute_verify_token_budget", recording), \
                rt.config(num_draft_tokens=case.gamma + 1, overlap=case.overlap):
            for s, (step, rids) in enumerate(zip(case.steps, case.batches())):
                pool.free_rows([rows.pop(rid) for rid in step.leave])
                for rid in step.join:
                    rows[rid] = pool.alloc_rows(1)[0]
                idx = torch.tensor([rows[r] for r in rids], dtype=torch.int64)
                conf = torch.tensor([case.confidence(r, s) for r in rids], dtype=torch.float32)
                di = make_next_draft_input(bonus_tokens=torch.ones(len(rids), dtype=torch.int64),
                                           new_seq_lens=torch.ones(len(rids), dtype=torch.int64))
                di.future_indices = idx if case.overlap else None
                batch = SimpleNamespace(spec_info=di, forward_mode=ForwardMode.DECODE, is_extend_in_batch=False,
                                        req_pool_indices=idx, req_pool_indices_cpu=idx, batch_size=lambda n=len(rids): n)
                seen.clear()
                if case.overlap:
                    planner.prepare_verify_budget(batch, fm)
                budget = planner.resolve_verify_token_budget(draft_input=di, confidence=conf,
                                                             prefix_lens=torch.zeros_like(idx), req_pool_indices=idx)
                survival = None if budget is None or not seen else seen[-1].to(torch.float64).tolist()
                reads.append(RelayRead(tuple(rids), survival))
                if case.overlap:
                    fm.publish(idx, torch.ones(len(rids), dtype=torch.int64), confidence=conf)
        return reads
