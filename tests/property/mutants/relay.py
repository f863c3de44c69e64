"""Confidence-relay bugs: what SGLang's host (non-CUDA) relay path does, one deviation at a time."""

import torch

from dspark import overlap_utils
from dspark.overlap_utils import BudgetConfidence, ConfidenceRing

from . import Mutant

_real_read = BudgetConfidence.read


def _writer_generation_ignored(self, rows, confidence, generation, future_map=None):
    """Pair the relayed values with the reader's generation: a reused row's history passes as the new request's."""
    real_ring_read = ConfidenceRing.read

    def read_as_current(ring, r):
        out = real_ring_read(ring, r)
        return None if out is None else (out[0], generation.clone())

    ConfidenceRing.read = read_as_current
    try:
        return _real_read(self, rows, confidence, generation, future_map)
    finally:
        ConfidenceRing.read = real_ring_read


def _newest_snapshot(self, rows):
    """The newest values instead of those from `lag` pushes ago: a lag of one step."""
    if not self._history:
        return None
    conf, gen = self._history[-1]
    rows = rows.cpu().to(torch.int64)
    return conf[rows].clone(), gen[rows].clone()


MUTANTS = [
    Mutant("relay-pairs-history-with-the-readers-generation", ("RELAY-001",),
           lambda mp: mp.setattr(BudgetConfidence, "read", _writer_generation_ignored)),
    Mutant("relay-lag-of-one-step", ("RELAY-001",), lambda mp: mp.setattr(ConfidenceRing, "read", _newest_snapshot)),
]
assert overlap_utils.CONFIDENCE_RELAY_LAG == 2  # the lag these mutants shorten or blur
