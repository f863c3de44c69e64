"""Confidence-relay bugs: what SGLang's host (non-CUDA) relay path does, one deviation at a time."""

import torch

from dspark import overlap_utils
from dspark.overlap_utils import BudgetConfidence, ConfidenceRing
from dspark.schedule_batch import ReqToTokenPool

from . import Mutant

_real_read = BudgetConfidence.read


def _writer_generation_ignored(self, rows, confidence, generation, future_map=None):
    """Pair the relayed values with the reader's generation: a reused row's history passes as the new request's."""
    real_ring_read = ConfidenceRing.read

    def read_as_current(ring, r, push=None):
        out = real_ring_read(ring, r, push)
        return None if out is None else (out[0], generation.clone())

    ConfidenceRing.read = read_as_current
    try:
        return _real_read(self, rows, confidence, generation, future_map)
    finally:
        ConfidenceRing.read = real_ring_read


def _newest_snapshot(self, rows, push=None):
    """The newest values instead of those from `lag` pushes ago (or than the push asked for): a lag of one step."""
    if not self._history:
        return None
    conf, gen = self._history[-1]
    rows = rows.cpu().to(torch.int64)
    return conf[rows].clone(), gen[rows].clone()


def _ring_copies_the_pools_generation(mp):
    """SGLang 0.5.23's CUDA ring (overlap_utils.py:245, `gen_ring[slot].copy_(pool.req_generation)`): each push
    pairs every row with the pool's generation at publish, not the generation of the request that wrote the row.
    Right while rows are taken just before their request's first step; a row taken earlier (a PD pre-allocation)
    passes the reader's check with its previous occupant's (or never-written) confidence."""
    pools = []
    real_init, real_push = ReqToTokenPool.__init__, ConfidenceRing.push

    def init(self, *a, **k):
        real_init(self, *a, **k)
        pools[:] = [self]  # the relay's pool: the newest one, as the reference relay builds one per case

    def push(self, rows, confidence, generation):
        real_push(self, rows, confidence, generation)
        if pools and pools[0].req_generation.shape[0] == self.req_pool_size:
            self._history[-1][1][:] = pools[0].req_generation

    mp.setattr(ReqToTokenPool, "__init__", init)
    mp.setattr(ConfidenceRing, "push", push)


MUTANTS = [
    Mutant("relay-pairs-history-with-the-readers-generation", ("RELAY-001",),
           lambda mp: mp.setattr(BudgetConfidence, "read", _writer_generation_ignored)),
    Mutant("relay-lag-of-one-step", ("RELAY-001",), lambda mp: mp.setattr(ConfidenceRing, "read", _newest_snapshot)),
    Mutant("relay-ring-copies-the-pools-generation", ("RELAY-002",), _ring_copies_the_pools_generation),
]
assert overlap_utils.CONFIDENCE_RELAY_LAG == 2  # the lag these mutants shorten or blur
