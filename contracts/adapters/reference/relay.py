"""Confidence relay level on the reference: the engine's own pool generations, FutureMap relay and
BudgetConfidence, driven in the engine's order (read the budget's confidence, then publish after the verify).
A pre-allocated request (RelayStep.prealloc) takes its row from the pool at its prealloc step and joins later.

With a stream surface (`run_confidence_relay_on`) the FutureMap's relay runs its copies on it, and its ring copy
reads the writers' generations from the pool, so the pool's free and take of a row go through the surface as a
caching allocator orders them: a freed row is handed out again only once the work recorded on it is done.
"""

from __future__ import annotations

import torch

from contracts.boundary.relay import RelayCase, RelayRead
from dspark.overlap_utils import CONFIDENCE_RELAY_LAG, BudgetConfidence, FutureMap
from dspark.schedule_batch import ReqToTokenPool


class ReferenceRelay:
    confidence_relay_lag = CONFIDENCE_RELAY_LAG

    def run_confidence_relay(self, case: RelayCase) -> list:
        return self._run_relay(case, None)

    def run_confidence_relay_on(self, case: RelayCase, streams) -> list:
        return self._run_relay(case, streams)

    @staticmethod
    def _run_relay(case: RelayCase, streams) -> list:
        pool = ReqToTokenPool(case.pool_size, 8)
        free, rows = list(range(case.pool_size)), {}
        fm, budget = FutureMap(case.pool_size, streams=streams), BudgetConfidence(case.pool_size)
        if streams is not None:
            fm.generation_source = pool.req_generation
        reads = []
        for s, (step, rids) in enumerate(zip(case.steps, case.batches())):
            for rid in step.leave:
                free.append(rows.pop(rid))
                if streams is not None:
                    streams.free(streams.mem("pool.req_generation", [free[-1]]))
            for rid in step.prealloc + tuple(r for r in step.join if r not in rows):  # a pre-allocated row is kept
                if streams is not None:
                    streams.reuse(streams.mem("pool.req_generation", [free[0]]), "the pool takes the row (generation += 1)")
                rows[rid] = pool.take_row(free.pop(0))
            idx = torch.tensor([rows[r] for r in rids], dtype=torch.int64)
            conf = torch.tensor([case.confidence(r, s) for r in rids], dtype=torch.float64)
            gen = pool.req_generation[idx]
            read = budget.read(idx, conf, gen, fm if case.overlap else None)
            reads.append(RelayRead(tuple(rids), None if read is None else torch.cumprod(read, 1).tolist()))
            if case.overlap:
                fm.publish(idx, torch.ones(len(rids), dtype=torch.int64), conf, gen)
            else:
                budget.record(idx, conf, gen)
        return reads
