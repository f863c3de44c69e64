"""CUDA-graph admission and replay-padding bugs in the reference runner."""

from bisect import bisect_right

from dspark import graph_runner

from . import Mutant


def _pool_size_not_captured(capture_bs, num_max_requests, **kw):
    return [bs for bs in sorted(set(capture_bs)) if bs <= num_max_requests] or [min(capture_bs)]


def _round_down(raw, buckets):
    """The largest captured size <= raw: fewer slots than live requests whenever raw falls between sizes."""
    return buckets[max(0, bisect_right(buckets, raw) - 1)]


_real_can_run = graph_runner.DecodeGraphRunner.can_run_graph


def _width_unchecked(self, fb):
    """Admission that trusts any per-request width (a draft batch replays a verify graph)."""
    saved = fb.spec_info
    fb.spec_info = None
    try:
        return _real_can_run(self, fb)
    finally:
        fb.spec_info = saved


MUTANTS = [
    Mutant("pool-size-not-captured", ("GRAPH-001",), lambda mp: mp.setattr(graph_runner, "normalize_capture_bs",
                                                                           _pool_size_not_captured)),
    Mutant("replay-size-rounds-down", ("GRAPH-002",), lambda mp: mp.setattr(graph_runner, "pad_to_bucket", _round_down)),
    Mutant("graph-width-unchecked", ("GRAPH-003",),
           lambda mp: mp.setattr(graph_runner.DecodeGraphRunner, "can_run_graph", _width_unchecked)),
]
