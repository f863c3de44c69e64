"""Verify-op benchmarks.

CPU: the torch reference's greedy accept against its floor, one torch.argmax
pass over the same logits, timed in the same run; the ratio goes into
``benchmark.extra_info`` (target: within 2x).

GPU (bs=1024, gamma=5, V=129280): CUDA-event times of the Triton kernels,
the torch reference run eagerly on the GPU, and FlashInfer's chain sampler,
each also as achieved bandwidth over the op's minimum byte count, as a
fraction of a device-to-device copy measured in the same run.

Results are merged into the JSON file named by ``DSPARK_BENCH_JSON`` (default
``bench_results/verify.json``), one key per benchmark.
"""

import json
import os
import statistics
import time
from pathlib import Path

import pytest
import torch

from dspark.verify import draw_coins, draw_resample_noise, greedy_accept, sampling_accept

pytestmark = pytest.mark.bench

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _record(key: str, payload: dict) -> None:
    path = Path(os.environ.get("DSPARK_BENCH_JSON", "bench_results/verify.json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {}
    env = {"torch": torch.__version__}
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        pass
    data[key] = dict(payload, env=env)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


# --- CPU ------------------------------------------------------------------------------


def _wall_ms(fn, rounds):
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times


@pytest.mark.benchmark(group="verify-cpu")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_bench_cpu_greedy_vs_argmax(benchmark, dtype):
    bs, gamma, vocab = 32, 5, 32000
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(bs, gamma + 1, vocab, generator=gen).to(dtype)
    pred = logits.argmax(-1)
    cand = torch.cat([pred[:, :1], pred[:, :-1]], 1)
    cand[::2, 3] = (cand[::2, 3] + 1) % vocab  # half the rows stop early
    lens = torch.randint(1, gamma + 2, (bs,), generator=gen)

    def ours():
        return greedy_accept(cand, logits, lens, backend="torch")

    def floor():
        return torch.argmax(logits, dim=-1)

    ours(), floor()
    ours_ms, floor_ms = [], []
    for _ in range(7):  # interleaved, so drift hits both alike
        ours_ms += _wall_ms(ours, 2)
        floor_ms += _wall_ms(floor, 2)
    ratio_min = min(ours_ms) / min(floor_ms)
    ratio_median = statistics.median(ours_ms) / statistics.median(floor_ms)
    info = dict(shape=[bs, gamma + 1, vocab], dtype=str(dtype), ours_min_ms=min(ours_ms),
                argmax_min_ms=min(floor_ms), ratio_min=ratio_min, ratio_median=ratio_median, target_ratio=2.0)
    benchmark.extra_info.update(info)
    benchmark.pedantic(ours, rounds=5, iterations=1, warmup_rounds=1)
    _record(f"cpu_greedy_vs_argmax_{str(dtype).removeprefix('torch.')}", info)
    # The ratio is reported, never asserted (timings are not test outcomes); the result is checked:
    # untouched rows accept up to their cap, perturbed rows stop before draft 3.
    out, cap = ours(), torch.clamp(lens - 1, max=gamma)
    assert torch.equal(out.correct_len[1::2].long(), cap[1::2])
    assert torch.equal(out.correct_len[::2].long(), torch.minimum(cap[::2], torch.full_like(cap[::2], 2)))


# --- GPU ------------------------------------------------------------------------------------


def _cuda_us(fn, warmup=3, reps=15):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def _copy_bandwidth() -> float:
    """Bytes/s of a 2 GiB device-to-device copy (read + write counted)."""
    src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = _cuda_us(lambda: dst.copy_(src), warmup=2, reps=10)
    return 2 * src.numel() / (us * 1e-6)


def _row(us: float, nbytes: int, copy_bw: float) -> dict:
    achieved = nbytes / (us * 1e-6)
    return dict(median_us=us, min_bytes=nbytes, gb_per_s=achieved / 1e9, fraction_of_copy_bw=achieved / copy_bw)


BS, GAMMA, VOCAB = 1024, 5, 129280


@pytest.mark.gpu
@needs_cuda
@pytest.mark.benchmark(group="verify-gpu")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_bench_gpu_greedy(benchmark, dtype):
    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(BS, GAMMA + 1, VOCAB, device="cuda", generator=gen).to(dtype)
    pred = logits.argmax(-1)
    cand = torch.cat([pred[:, :1], pred[:, :-1]], 1)
    lens = torch.randint(1, GAMMA + 2, (BS,), device="cuda", generator=gen)
    nbytes = logits.numel() * logits.element_size()  # one read of the logits dominates
    copy_bw = _copy_bandwidth()
    rows = {
        "triton": _row(_cuda_us(lambda: greedy_accept(cand, logits, lens, backend="triton", check=False)),
                       nbytes, copy_bw),
        "torch_eager": _row(_cuda_us(lambda: greedy_accept(cand, logits, lens, backend="torch", check=False)),
                            nbytes, copy_bw),
        "torch_argmax_only": _row(_cuda_us(lambda: torch.argmax(logits, -1)), nbytes, copy_bw),
        "flashinfer": "n/a: FlashInfer has no greedy verify",
    }
    info = dict(shape=[BS, GAMMA + 1, VOCAB], dtype=str(dtype), copy_bw_gb_per_s=copy_bw / 1e9, **rows)
    benchmark.extra_info.update(info)
    benchmark.pedantic(lambda: (greedy_accept(cand, logits, lens, check=False), torch.cuda.synchronize()),
                       rounds=5, iterations=1, warmup_rounds=1)
    _record(f"gpu_greedy_{str(dtype).removeprefix('torch.')}", info)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.benchmark(group="verify-gpu")
@pytest.mark.parametrize("one_hot", [False, True], ids=["draft_probs", "one_hot"])
def test_bench_gpu_sampling(benchmark, one_hot):
    gen = torch.Generator(device="cuda").manual_seed(1)
    base = torch.randn(BS, GAMMA + 1, VOCAB, device="cuda", generator=gen)
    p = torch.softmax(base, -1)
    q = None if one_hot else torch.softmax(base[:, :GAMMA] + 0.5 * torch.randn(BS, GAMMA, VOCAB, device="cuda",
                                                                                generator=gen), -1)
    source = p[:, :GAMMA] if one_hot else q
    drafts = torch.multinomial(source.reshape(-1, VOCAB), 1, generator=gen).view(BS, GAMMA)
    cand = torch.cat([torch.zeros(BS, 1, dtype=torch.int64, device="cuda"), drafts], 1)
    coins = draw_coins(BS, GAMMA, generator=gen, device="cuda")
    noise = draw_resample_noise(BS, VOCAB, generator=gen, device="cuda")
    # Minimum traffic: per request one target row, one draft row (if any) and one noise row.
    row_bytes = 4 * VOCAB * (2 if one_hot else 3)
    nbytes = BS * row_bytes
    copy_bw = _copy_bandwidth()
    rows = {
        "triton": _row(_cuda_us(lambda: sampling_accept(cand, p, q, coins, noise, backend="triton", check=False)),
                       nbytes, copy_bw),
        "torch_eager": _row(_cuda_us(lambda: sampling_accept(cand, p, q, coins, noise, backend="torch", check=False)),
                            nbytes, copy_bw),
    }
    if one_hot:
        rows["flashinfer"] = "n/a: needs draft_probs"
    else:
        try:
            from flashinfer.sampling import chain_speculative_sampling
        except ImportError:
            rows["flashinfer"] = "n/a: flashinfer not installed"
        else:
            drafts32 = drafts.to(torch.int32)
            rows["flashinfer"] = _row(_cuda_us(lambda: chain_speculative_sampling(q, drafts32, p)),
                                      BS * 4 * VOCAB * 2, copy_bw)  # its own minimum: a p row and a q row
    info = dict(shape=[BS, GAMMA + 1, VOCAB], dtype="float32", one_hot=one_hot, copy_bw_gb_per_s=copy_bw / 1e9,
                **rows)
    benchmark.extra_info.update(info)
    benchmark.pedantic(lambda: (sampling_accept(cand, p, q, coins, noise, check=False), torch.cuda.synchronize()),
                       rounds=5, iterations=1, warmup_rounds=1)
    _record(f"gpu_sampling_{'one_hot' if one_hot else 'draft_probs'}", info)
