"""CUDA-graph bucket selection (SGLang: base/decode cuda_graph_runner helpers).

A captured graph serves every batch up to its size, so a batch is padded up to
the smallest captured bucket >= its size. Under DP attention every rank must
pick the same bucket, chosen from the *raw per-rank request counts*
(`original_global_num_tokens_cpu`), never from token counts.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Iterable, List, Optional, Sequence

from dspark import _validate


def default_capture_bs(max_bs: int) -> List[int]:
    """The decode sizes captured when none are configured, with speculative decoding (SGLang:
    generate_decode_cuda_graph_batch_sizes): dense where padding would waste most (every size to 8), then
    steps of 2 to 32, 4 to 64, 8 to 256 and 16 beyond; `max_bs` itself always."""
    _validate.positive_int("max_bs", max_bs)
    steps = ((1, 9, 1), (10, 33, 2), (40, 65, 4), (72, 257, 8), (272, max_bs + 1, 16))
    sizes = [bs for lo, hi, step in steps for bs in range(lo, hi, step) if bs <= max_bs]
    return sizes if max_bs in sizes else sizes + [max_bs]


def normalize_capture_bs(capture_bs: Iterable[int], num_max_requests: int, *, width: int = 1,
                         attn_tp_alignment: int = 1) -> List[int]:
    """Configured sizes plus `num_max_requests` when smaller than the largest, aligned, sorted, unique (H1)."""
    _validate.positive_int("num_max_requests", num_max_requests)
    _validate.positive_int("width", width)
    _validate.positive_int("attn_tp_alignment", attn_tp_alignment)
    sizes = set()
    for bs in capture_bs:
        _validate.positive_int("capture_bs[]", bs)
        sizes.add(bs)
    if sizes and num_max_requests < max(sizes):
        sizes.add(num_max_requests)
    out = sorted(bs for bs in sizes if bs * width % attn_tp_alignment == 0 and bs <= num_max_requests)
    if not out:
        raise ValueError(f"capture_bs: no size left after filtering by num_max_requests={num_max_requests}")
    return out


def pad_to_bucket(raw: int, buckets: Sequence[int]) -> int:
    """The smallest bucket >= raw (H2); raises when raw exceeds the largest."""
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise ValueError(f"raw: expected a non-negative int, got {raw!r}")
    _check_buckets(buckets)
    if raw > buckets[-1]:
        raise ValueError(f"raw: {raw} exceeds the largest captured bucket {buckets[-1]}")
    return buckets[bisect_left(buckets, raw)]


def max_dp_batch_size(original_global_num_tokens_cpu: Optional[Sequence[int]]) -> int:
    """The graph batch size under DP: the largest raw per-rank request count (H3)."""
    if original_global_num_tokens_cpu is None:
        raise RuntimeError("DP CUDA graph replay requires raw per-rank request counts")
    counts = _validate.count_list("original_global_num_tokens_cpu", list(original_global_num_tokens_cpu))
    if not counts:
        raise ValueError("original_global_num_tokens_cpu: empty")
    return max(counts)


def graph_batch_size(local_bs: int, buckets: Sequence[int], original_global_num_tokens_cpu=None,
                     dp_attention: bool = False) -> Optional[int]:
    """The bucket a decode step replays, or None when the batch is too large for any graph."""
    _check_buckets(buckets)
    raw = max_dp_batch_size(original_global_num_tokens_cpu) if dp_attention else local_bs
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise ValueError(f"local_bs: expected a non-negative int, got {raw!r}")
    return None if raw > buckets[-1] else pad_to_bucket(raw, buckets)


def _check_buckets(buckets: Sequence[int]) -> None:
    sizes = list(buckets)
    if not sizes:
        raise ValueError("buckets: empty")
    if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes) or \
            any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise ValueError(f"buckets: captured sizes must be positive ints, strictly increasing, got {sizes}")


def capture_num_tokens(capture_bs: Sequence[int], tokens_per_req: int) -> List[int]:
    """Token buckets of the ragged verify graphs: {bs * T} (F5)."""
    _validate.positive_int("tokens_per_req", tokens_per_req)
    return sorted({_validate.positive_int("capture_bs[]", bs) * tokens_per_req for bs in capture_bs})
