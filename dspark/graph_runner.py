"""The decode CUDA-graph runner's admission and replay padding (SGLang `DecodeCudaGraphRunner`), without graphs.

It captures `capture_bs` (normalised to the request pool) at `captured_req_width`
tokens per request slot; `can_run_graph` admits a batch whose geometry a graph
holds, and `load_batch` picks the size it replays: under DP attention the
largest raw per-rank request count, padded to the smallest captured size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from dspark import _validate
from dspark.graph_buckets import max_dp_batch_size, normalize_capture_bs, pad_to_bucket
from dspark.spec_info import draft_query_width


@dataclass
class Replay:
    bs: int  # captured size replayed
    raw_bs: int  # live requests in it
    num_tokens: int  # bs * captured_req_width


class DecodeGraphRunner:
    def __init__(self, capture_bs: Sequence[int], max_running_requests: int, captured_req_width: int, *,
                 dp_attention: bool = False, dp_local: bool = False):
        """dp_local: the forward runs on this rank alone (a dense DSpark draft), so it keys graphs by its own size."""
        self.captured_req_width = _validate.positive_int("captured_req_width", captured_req_width)
        self.capture_bs = normalize_capture_bs(capture_bs, max_running_requests)
        self.max_bs = self.capture_bs[-1]
        self.dp_attention = bool(dp_attention)
        self.dp_gather = self.dp_attention and not dp_local

    def _raw_bs(self, fb) -> int:
        return max_dp_batch_size(fb.original_global_num_tokens_cpu) if self.dp_gather else fb.batch_size

    def can_run_graph(self, fb) -> bool:
        width = getattr(fb.spec_info, "num_tokens_per_req", self.captured_req_width)
        if width != self.captured_req_width:
            return False
        if self.dp_attention and not fb.can_run_decode_cuda_graph:
            return False
        return self._raw_bs(fb) <= self.max_bs

    def load_batch(self, fb) -> Replay:
        if not self.can_run_graph(fb):
            raise ValueError(f"forward_batch: no captured graph holds batch size {fb.batch_size}")
        bs = pad_to_bucket(max(self._raw_bs(fb), fb.batch_size), self.capture_bs)
        return Replay(bs, fb.batch_size, bs * self.captured_req_width)


def runner_width(runner: str, gamma: int, sample_from_anchor: bool) -> int:
    """Tokens per request slot: the verify window on the target, the draft query width on the draft."""
    if runner == "target":
        return gamma + 1
    if runner == "draft":
        return draft_query_width(gamma, sample_from_anchor)
    raise ValueError(f"runner: expected 'target' or 'draft', got {runner!r}")
