"""Verify kernels on a GPU: compiled Triton against torch at production shapes,
FlashInfer's chain sampler as an independent check, and CUDA-graph replay.

Everything here is skipped without CUDA. FlashInfer is imported inside the
tests that use it (the import alone takes seconds) and skipped if missing.
"""

import dataclasses
import math

import pytest
import torch

from contracts import oracle
from dspark.verify import (
    AcceptOut,
    draw_coins,
    draw_resample_noise,
    finalize,
    greedy_accept,
    mixed_accept,
    sampling_accept,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

GAMMAS = [5, 7]
VOCABS = [129280, 151936]  # DeepSeek-V3, Qwen2
DTYPES = [torch.bfloat16, torch.float32]


@pytest.fixture(autouse=True)
def _compiled_kernels():
    from dspark.verify import triton_kernels

    if triton_kernels.INTERPRETED:
        pytest.skip("TRITON_INTERPRET=1 is set: the compiled kernels are not what would run")


def _assert_same(expected, got, path="result"):
    if dataclasses.is_dataclass(expected):
        assert type(expected) is type(got), path
        for f in dataclasses.fields(expected):
            _assert_same(getattr(expected, f.name), getattr(got, f.name), f"{path}.{f.name}")
        return
    if isinstance(expected, (tuple, list)):
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            _assert_same(e, g, f"{path}[{i}]")
        return
    assert expected.dtype == got.dtype, f"{path}: dtype {expected.dtype} vs {got.dtype}"
    if not torch.equal(expected, got):
        bad = (expected != got).nonzero()[:5].tolist()
        raise AssertionError(f"{path}: torch and Triton differ first at {bad}")


def _parity(op, *args, **kwargs):
    expected = op(*args, backend="torch", **kwargs)
    got = op(*args, backend="triton", **kwargs)
    torch.cuda.synchronize()
    _assert_same(expected, got)
    return expected


def _gen(seed):
    return torch.Generator(device="cuda").manual_seed(seed)


def _tile(op):
    from dspark.verify import triton_kernels

    return triton_kernels.vocab_tile(op, "cuda")


def _greedy_case(bs, gamma, vocab, dtype, seed=0):
    gen = _gen(seed)
    logits = torch.randn(bs, gamma + 1, vocab, device="cuda", generator=gen).to(dtype)
    tile = _tile("greedy")
    # Planted ties: across the first tile edge, and at a far edge versus the last column.
    logits[0::7, :, [tile - 1, tile]] = 100.0
    logits[3::7, :, [2 * tile, vocab - 1]] = 100.0
    pred = logits.argmax(-1)
    lengths = torch.randint(0, gamma + 1, (bs, 1), device="cuda", generator=gen)
    j = torch.arange(gamma, device="cuda")[None, :]
    drafts = torch.where(j < lengths, pred[:, :-1], (pred[:, :-1] + 1) % vocab)
    cand = torch.cat([torch.randint(0, vocab, (bs, 1), device="cuda", generator=gen), drafts], 1)
    lens = torch.randint(1, gamma + 2, (bs,), device="cuda", generator=gen)
    return cand, logits, lens


def _sampling_case(bs, gamma, vocab, dtype, seed=0, one_hot=False):
    gen = _gen(seed)
    base = torch.randn(bs, gamma + 1, vocab, device="cuda", generator=gen)
    # One planted peak per row (~0.8 of the mass), shared by target and draft,
    # so acceptance is high enough to reach every length, one-hot drafts included.
    peak = torch.randint(0, vocab, (bs, gamma + 1, 1), device="cuda", generator=gen)
    base.scatter_add_(-1, peak, torch.full(peak.shape, 14.0, device="cuda"))
    q = torch.softmax(base[:, :gamma], -1)
    p = torch.softmax(base + 0.5 * torch.randn(base.shape, device="cuda", generator=gen), -1)
    source = p[:, :gamma] if one_hot else q
    drafts = torch.multinomial(source.reshape(-1, vocab), 1, generator=gen).view(bs, gamma)
    cand = torch.cat([torch.randint(0, vocab, (bs, 1), device="cuda", generator=gen), drafts], 1)
    coins = draw_coins(bs, gamma, generator=gen, device="cuda")
    noise = draw_resample_noise(bs, vocab, generator=gen, device="cuda")
    lens = torch.randint(1, gamma + 2, (bs,), device="cuda", generator=gen)
    return cand, p.to(dtype), None if one_hot else q.to(dtype), coins, noise, lens


# --- Triton vs torch at production shapes ---------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("gamma", GAMMAS)
def test_greedy_parity_large(gamma, vocab, dtype):
    cand, logits, lens = _greedy_case(1024, gamma, vocab, dtype, seed=gamma)
    _parity(greedy_accept, cand, logits, lens)
    out = _parity(greedy_accept, cand, logits)
    assert int(out.correct_len.min()) == 0 and int(out.correct_len.max()) == gamma


@pytest.mark.parametrize("bs", [1, 3, 129])
def test_greedy_parity_small_batches(bs):
    _parity(greedy_accept, *_greedy_case(bs, 5, 129280, torch.bfloat16, seed=bs))


@pytest.mark.parametrize("one_hot", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("gamma", GAMMAS)
def test_sampling_parity_large(gamma, vocab, dtype, one_hot):
    cand, p, q, coins, noise, lens = _sampling_case(1024, gamma, vocab, dtype, seed=gamma, one_hot=one_hot)
    _parity(sampling_accept, cand, p, q, coins, noise, lens)
    out = _parity(sampling_accept, cand, p, q, coins, noise)
    assert int(out.correct_len.max()) >= 2  # the accept path was exercised, not only row 0


def test_mixed_parity_large():
    gamma, vocab = 5, 129280
    cand, logits, lens = _greedy_case(1024, gamma, vocab, torch.bfloat16, seed=1)
    _, p, q, coins, noise, _ = _sampling_case(1024, gamma, vocab, torch.float32, seed=2)
    mask = torch.arange(1024, device="cuda") % 3 == 0
    out = _parity(mixed_accept, cand, logits, p, q, coins, noise, mask, lens)
    greedy = greedy_accept(cand, logits, lens)
    assert torch.equal(out.correct_len[mask], greedy.correct_len[mask])
    assert torch.equal(out.bonus[mask], greedy.bonus[mask])


# --- FlashInfer chain_speculative_sampling cross-checks ----------------------------------------


def _flashinfer_chain(draft_probs, drafts, target_probs):
    """FlashInfer's sampler with fresh int32 counters; returns (tokens int64, emitted int64)."""
    sampling = pytest.importorskip("flashinfer.sampling")
    bs = drafts.shape[0]
    accepted = torch.zeros(bs, dtype=torch.int32, device="cuda")
    emitted = torch.zeros(bs, dtype=torch.int32, device="cuda")
    tokens, _, emitted = sampling.chain_speculative_sampling(
        draft_probs.float().contiguous(), drafts.to(torch.int32).contiguous(), target_probs.float().contiguous(),
        maybe_output_accepted_token_num=accepted, maybe_output_emitted_draft_token_num=emitted)
    tokens = tokens.long()
    assert torch.equal(emitted.long() + 1, (tokens != -1).sum(1)), "FlashInfer: emitted + 1 != #non(-1)"
    return tokens, emitted.long()


def _ours(cand, p, q, seed):
    bs, vocab = cand.shape[0], p.shape[-1]
    gen = _gen(seed)
    acc = sampling_accept(cand, p, q, draw_coins(bs, cand.shape[1] - 1, generator=gen, device="cuda"),
                          draw_resample_noise(bs, vocab, generator=gen, device="cuda"))
    return finalize(torch.zeros(bs, dtype=torch.int64, device="cuda"), cand[:, 1:], acc).out_tokens, acc


@pytest.mark.parametrize("vocab", [33, 1025, 129280])
def test_flashinfer_one_hot_target_equal_to_drafts(vocab):
    bs, gamma = 257, 5
    gen = _gen(vocab)
    tokens = torch.randint(0, vocab, (bs, gamma + 1), device="cuda", generator=gen)
    p = torch.nn.functional.one_hot(tokens, vocab).float()
    q = p[:, :gamma].contiguous()
    cand = torch.cat([torch.zeros(bs, 1, dtype=torch.int64, device="cuda"), tokens[:, :gamma]], 1)
    theirs, emitted = _flashinfer_chain(q, cand[:, 1:], p)
    ours, acc = _ours(cand, p, q, seed=1)
    assert torch.equal(theirs, tokens) and torch.equal(ours, tokens)
    assert (emitted == gamma).all() and (acc.correct_len == gamma).all()


@pytest.mark.parametrize("vocab", [34, 4097, 151936])
def test_flashinfer_disjoint_supports(vocab):
    bs, gamma, half = 511, 3, vocab // 2
    gen = _gen(vocab)
    p = torch.zeros(bs, gamma + 1, vocab, device="cuda")
    p[..., :half] = torch.softmax(torch.randn(bs, gamma + 1, half, device="cuda", generator=gen), -1)
    q = torch.zeros(bs, gamma, vocab, device="cuda")
    q[..., half:] = torch.softmax(torch.randn(bs, gamma, vocab - half, device="cuda", generator=gen), -1)
    drafts = torch.multinomial(q.view(-1, vocab), 1, generator=gen).view(bs, gamma)
    cand = torch.cat([torch.zeros(bs, 1, dtype=torch.int64, device="cuda"), drafts], 1)
    theirs, emitted = _flashinfer_chain(q, drafts, p)
    ours, acc = _ours(cand, p, q, seed=2)
    for tokens, accepted in ((theirs, emitted), (ours, acc.correct_len)):
        assert (accepted == 0).all()
        assert (tokens[:, 0] < half).all() and (tokens[:, 1:] == -1).all()


def test_flashinfer_single_token_residual():
    """Draft a has p(a) = 0 (always rejected, residual = {b}); draft c has p = q (always accepted)."""
    bs, vocab, a, b, c, z = 1024, 4099, 5, 4097, 2048, 17
    gen = _gen(3)
    p = torch.zeros(bs, 2, vocab, device="cuda")
    p[:, 0, b], p[:, 0, c] = 0.3, 0.7
    p[:, 1, z] = 1.0
    q = torch.zeros(bs, 1, vocab, device="cuda")
    q[:, 0, a], q[:, 0, c] = 0.3, 0.7
    drafts = torch.multinomial(q.view(-1, vocab), 1, generator=gen).view(bs, 1)
    cand = torch.cat([torch.zeros(bs, 1, dtype=torch.int64, device="cuda"), drafts], 1)
    expected = torch.where(drafts == c, torch.cat([drafts, torch.full_like(drafts, z)], 1),
                           torch.tensor([b, -1], device="cuda").expand(bs, 2))
    theirs, _ = _flashinfer_chain(q, drafts, p)
    ours, _ = _ours(cand, p, q, seed=4)
    assert torch.equal(theirs, expected) and torch.equal(ours, expected)


def _tv_bound(cells, count, delta=1e-6):
    """Distribution-free bound on the empirical total variation at confidence 1 - delta."""
    return 0.5 * math.sqrt((cells - 1) / count) + math.sqrt(math.log(1 / delta) / (2 * count))


@pytest.mark.stat
def test_flashinfer_and_ours_follow_the_exact_law():
    """Both samplers' accept counts and per-position tokens against oracle laws (N = 200k)."""
    n, gamma, vocab = 200_000, 3, 8
    gen = torch.Generator().manual_seed(11)
    p_rows = torch.softmax(torch.randn(gamma + 1, vocab, generator=gen, dtype=torch.float64) * 1.5, -1)
    q_rows = torch.softmax(torch.randn(gamma, vocab, generator=gen, dtype=torch.float64) * 1.5, -1)
    q_rows[0, 0] = 0.0  # a zero of the draft where the target has mass
    q_rows[0] /= q_rows[0].sum()
    p = p_rows.float().cuda().expand(n, -1, -1).contiguous()
    q = q_rows.float().cuda().expand(n, -1, -1).contiguous()
    drafts = torch.multinomial(q.view(-1, vocab), 1, generator=_gen(5)).view(n, gamma)
    cand = torch.cat([torch.zeros(n, 1, dtype=torch.int64, device="cuda"), drafts], 1)
    count_law = oracle.accept_count_law(p_rows, q_rows)
    theirs, emitted = _flashinfer_chain(q, drafts, p)
    ours, acc = _ours(cand, p, q, seed=6)
    for name, tokens, accepted in (("flashinfer", theirs, emitted), ("ours", ours, acc.correct_len.long())):
        hist = torch.bincount(accepted.cpu(), minlength=gamma + 1).double() / n
        tv = 0.5 * (hist - count_law).abs().sum().item()
        assert tv < _tv_bound(gamma + 1, n), f"{name}: accept-count TV {tv:.4f}"
        for k in range(gamma + 1):
            col = tokens[:, k].cpu()
            col = col[col >= 0]
            freq = torch.bincount(col, minlength=vocab).double() / col.numel()
            tv = 0.5 * (freq - p_rows[k]).abs().sum().item()
            assert tv < _tv_bound(vocab, col.numel()), f"{name}: position {k} TV {tv:.4f} (n={col.numel()})"


# --- CUDA graphs ------------------------------------------------------------------------------------


def test_cuda_graph_replay_matches_eager():
    """Capture greedy, sampling, mixed and finalize once; replay on rewritten inputs."""
    bs, gamma, vocab = 256, 5, 129280
    cand, logits, lens = _greedy_case(bs, gamma, vocab, torch.bfloat16, seed=7)
    _, p, q, coins, noise, _ = _sampling_case(bs, gamma, vocab, torch.float32, seed=8)
    mask = torch.arange(bs, device="cuda") % 2 == 0
    prefix = torch.arange(bs, device="cuda", dtype=torch.int64)

    def step():
        g = greedy_accept(cand, logits, lens)  # value checks skip themselves while capturing
        s = sampling_accept(cand, p, q, coins, noise, lens)
        m = mixed_accept(cand, logits, p, q, coins, noise, mask, lens)
        return g, s, m, finalize(prefix, cand[:, 1:], m)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and warm up outside the capture
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    for seed in range(3):
        c2, l2, v2 = _greedy_case(bs, gamma, vocab, torch.bfloat16, seed=100 + seed)
        _, p2, q2, u2, w2, _ = _sampling_case(bs, gamma, vocab, torch.float32, seed=200 + seed)
        for dst, src in ((cand, c2), (logits, l2), (lens, v2), (p, p2), (q, q2), (coins, u2), (noise, w2)):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        _assert_same(step(), captured)
    assert isinstance(captured[0], AcceptOut)
