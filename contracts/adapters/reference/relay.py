"""Confidence relay level on the reference: the engine's own pool generations, FutureMap relay and
BudgetConfidence, driven in the engine's order (read the budget's confidence, then publish after the verify)."""

from __future__ import annotations

import torch

from contracts.boundary.relay import RelayCase, RelayRead
from dspark.overlap_utils import CONFIDENCE_RELAY_LAG, BudgetConfidence, FutureMap
from dspark.schedule_batch import ReqToTokenPool


class ReferenceRelay:
    confidence_relay_lag = CONFIDENCE_RELAY_LAG

    def run_confidence_relay(self, case: RelayCase) -> list:
        pool = ReqToTokenPool(case.pool_size, 8)
        free, rows = list(range(case.pool_size)), {}
        fm, budget = FutureMap(case.pool_size), BudgetConfidence(case.pool_size)
        reads = []
        for s, (step, rids) in enumerate(zip(case.steps, case.batches())):
            for rid in step.leave:
                free.append(rows.pop(rid))
            for rid in step.join:
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
