"""Verify/accept ops: torch reference against hand-worked rows, Triton against torch.

The Triton side runs through the interpreter on CPU-only machines and as
compiled kernels on CUDA copies of the inputs when a GPU is present. Every
parity check goes through `_parity`, which compares dtypes and values exactly.
"""

# The root conftest selects the Triton interpreter when there is no GPU (it
# must happen before the kernel module is first imported); with CUDA present
# the Triton side runs as compiled kernels on CUDA copies of the inputs.
import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import oracle
from dspark.verify import (
    AcceptOut,
    Finalized,
    draw_coins,
    draw_resample_noise,
    finalize,
    greedy_accept,
    mixed_accept,
    reference,
    sampling_accept,
)

NAN, INF = float("nan"), float("inf")
FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


# --- helpers -------------------------------------------------------------------


def _triton_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def _tile(op: str) -> int:
    from dspark.verify import triton_kernels

    return triton_kernels.vocab_tile(op, _triton_device())


def _to(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if dataclasses.is_dataclass(obj):
        return type(obj)(**{f.name: _to(getattr(obj, f.name), device) for f in dataclasses.fields(obj)})
    return obj


def _assert_same(expected, got, path="result"):
    """Exact equality: same type, and per tensor the same dtype, shape and values."""
    assert type(expected) is type(got), f"{path}: {type(expected).__name__} vs {type(got).__name__}"
    if dataclasses.is_dataclass(expected):
        for f in dataclasses.fields(expected):
            _assert_same(getattr(expected, f.name), getattr(got, f.name), f"{path}.{f.name}")
    elif isinstance(expected, (tuple, list)):
        assert len(expected) == len(got), f"{path}: length {len(expected)} vs {len(got)}"
        for i, (e, g) in enumerate(zip(expected, got)):
            _assert_same(e, g, f"{path}[{i}]")
    elif isinstance(expected, torch.Tensor):
        assert expected.dtype == got.dtype, f"{path}: dtype {expected.dtype} vs {got.dtype}"
        g = got.cpu()
        assert torch.equal(expected.cpu(), g), f"{path}: torch {expected.tolist()} vs triton {g.tolist()}"
    else:
        assert expected == got, f"{path}: {expected!r} vs {got!r}"


def _parity(op, *args, **kwargs):
    """Run ``op`` with the torch backend, then the Triton one; demand identical results."""
    expected = op(*args, backend="torch", **kwargs)
    device = _triton_device()
    if device.type == "cpu":
        from dspark.verify import triton_kernels

        assert triton_kernels.INTERPRETED, (
            "dspark.verify.triton_kernels was imported before TRITON_INTERPRET=1 was set; "
            "set it in the environment or in conftest.py")
    got = op(*_to(list(args), device), backend="triton", **_to(kwargs, device))
    _assert_same(expected, got)
    return expected


def _ints(*rows):
    return torch.tensor(rows, dtype=torch.int64)


def _logits_from_argmax(pred: torch.Tensor, vocab: int, dtype=torch.float32) -> torch.Tensor:
    """Logits whose row argmax is ``pred`` (random background below 0, winner at 5)."""
    gen = torch.Generator().manual_seed(1)
    logits = -torch.rand(*pred.shape, vocab, generator=gen)
    logits.scatter_(-1, pred[..., None], 5.0)
    return logits.to(dtype)


def _follow_argmax(logits: torch.Tensor, lengths: torch.Tensor, vocab: int) -> torch.Tensor:
    """Candidates whose first ``lengths[b]`` drafts match the argmax and the next one does not."""
    bs, width, _ = logits.shape
    pred = logits.float().argmax(-1)
    drafts = pred[:, :-1].clone()
    j = torch.arange(width - 1)[None, :]
    wrong = (drafts + 1) % vocab
    drafts = torch.where(j == lengths[:, None], wrong, drafts)
    return torch.cat([torch.zeros(bs, 1, dtype=torch.int64), drafts], 1)


def _rand_probs(gen, *shape, dtype=torch.float32, sparsity=0.0):
    x = torch.randn(*shape, generator=gen, dtype=torch.float64) * 2
    if sparsity:
        x = x.masked_fill(torch.rand(*shape, generator=gen, dtype=torch.float64) < sparsity, -INF)
        x[..., 0] = torch.where(torch.isinf(x).all(-1), 0.0, x[..., 0])  # keep every row non-empty
    return torch.softmax(x, -1).to(dtype)


def _rand_sampling_case(seed, bs, gamma, vocab, dtype=torch.float32, one_hot=False, with_lens=False):
    """Sampling inputs with drafts drawn from q, so accept lengths spread over [0, gamma]."""
    gen = torch.Generator().manual_seed(seed)
    p = _rand_probs(gen, bs, gamma + 1, vocab, dtype=dtype, sparsity=0.3)
    q = None if one_hot else _rand_probs(gen, bs, gamma, vocab, dtype=dtype, sparsity=0.3)
    source = p[:, :gamma] if one_hot else q
    drafts = torch.multinomial(source.double().reshape(-1, vocab), 1, generator=gen).view(bs, gamma)
    anchor = torch.randint(0, vocab, (bs, 1), generator=gen)
    cand = torch.cat([anchor, drafts], 1)
    coins = draw_coins(bs, gamma, generator=gen)
    noise = draw_resample_noise(bs, vocab, generator=gen)
    lens = torch.randint(1, gamma + 2, (bs,), generator=gen) if with_lens else None
    return cand, p, q, coins, noise, lens


# --- greedy: hand-worked rows ----------------------------------------------------

# gamma = 3, V = 6. Rows: full accept; mismatch at draft 2 (a later match is
# ignored); mismatch at draft 1.
_G_PRED = _ints([1, 2, 3, 4], [1, 5, 3, 4], [1, 2, 3, 4])
_G_CAND = _ints([0, 1, 2, 3], [0, 1, 2, 3], [0, 4, 2, 3])


def test_greedy_reference_hand_rows():
    out = greedy_accept(_G_CAND, _logits_from_argmax(_G_PRED, 6), backend="torch")
    _assert_same(AcceptOut(torch.tensor([3, 1, 0], dtype=torch.int32), _ints(4, 5, 1),
                           torch.tensor([0, 0, 0], dtype=torch.int32)), out)


def test_greedy_reference_hand_rows_capped():
    # Row 0 passes 3 drafts but may verify only 2 rows: keep 1, trim 2, and the
    # bonus is the target's row-1 argmax, which is the accepted draft 2.
    out = greedy_accept(_G_CAND, _logits_from_argmax(_G_PRED, 6), _ints(2, 4, 1), backend="torch")
    _assert_same(AcceptOut(torch.tensor([1, 1, 0], dtype=torch.int32), _ints(2, 5, 1),
                           torch.tensor([2, 0, 0], dtype=torch.int32)), out)
    assert out.bonus[0] == _G_CAND[0, 2]


@pytest.mark.parametrize("dtype", FLOATS)
def test_greedy_argmax_policy(dtype):
    """Ties go to the lowest index; NaN beats everything, +inf included; all -inf picks 0."""
    rows = [
        [1.0, 3.0, 3.0, 2.0, 3.0],  # tie -> 1
        [2.0, 2.0, 2.0, 2.0, 2.0],  # all equal -> 0
        [1.0, NAN, INF, NAN, 0.0],  # NaN over +inf, lowest NaN -> 1
        [-INF, -INF, -INF, -INF, -INF],  # -> 0
        [INF, 1.0, INF, NAN, 0.0],  # a NaN anywhere wins -> 3
        [-1.0, -INF, -0.5, -0.5, -2.0],  # -> 2
    ]
    logits = torch.tensor(rows, dtype=dtype).view(6, 1, 5).expand(6, 2, 5).contiguous()
    cand = torch.zeros(6, 2, dtype=torch.int64)
    out = _parity(greedy_accept, cand, logits)
    assert out.bonus.tolist() == [1, 0, 1, 0, 3, 2]


# --- greedy: torch vs Triton -------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("with_lens", [False, True])
def test_greedy_parity_random(dtype, with_lens):
    gen = torch.Generator().manual_seed(7)
    bs, gamma, vocab = 12, 4, 2 * _tile("greedy") + 37
    logits = torch.randn(bs, gamma + 1, vocab, generator=gen).to(dtype)
    lengths = torch.arange(bs) % (gamma + 1)  # every accept length, incl. full accept
    cand = _follow_argmax(logits, lengths, vocab)
    lens = (torch.arange(bs) % (gamma + 1) + 1).flip(0) if with_lens else None
    out = _parity(greedy_accept, cand, logits, lens)
    if not with_lens:
        assert out.correct_len.tolist() == lengths.tolist()


@pytest.mark.parametrize("boundary", [1, 2])
def test_greedy_parity_tie_across_tile_boundary(boundary):
    """Equal maxima on both sides of a vocabulary tile edge: the earlier column wins."""
    tile = _tile("greedy")
    vocab = 2 * tile + 5
    edge = boundary * tile
    logits = torch.zeros(3, 2, vocab)
    logits[0, :, [edge - 1, edge]] = 7.0  # straddles the edge
    logits[1, :, [edge, edge + 1]] = 7.0  # both in the later tile
    logits[2, :, [3, edge, vocab - 1]] = 7.0  # first tile wins over two later ones
    cand = torch.zeros(3, 2, dtype=torch.int64)
    out = _parity(greedy_accept, cand, logits)
    assert out.bonus.tolist() == [edge - 1, edge, 3]


def test_greedy_parity_nan_in_later_tile():
    tile = _tile("greedy")
    vocab = 2 * tile + 1
    logits = torch.zeros(2, 2, vocab)
    logits[:, :, 0] = INF
    logits[0, :, tile + 2] = NAN
    logits[1, :, vocab - 1] = NAN
    out = _parity(greedy_accept, torch.zeros(2, 2, dtype=torch.int64), logits)
    assert out.bonus.tolist() == [tile + 2, vocab - 1]


def test_greedy_parity_all_equal_logits():
    logits = torch.full((4, 4, 300), 0.25)
    cand = torch.tensor([[0, 0, 0, 0], [0, 0, 1, 0], [0, 5, 0, 0], [3, 0, 0, 0]])
    out = _parity(greedy_accept, cand, logits, _ints(4, 4, 4, 2))
    assert out.correct_len.tolist() == [3, 1, 0, 1]
    assert out.cap_trim.tolist() == [0, 0, 0, 2]
    assert out.bonus.tolist() == [0, 0, 0, 0]


def test_greedy_parity_verify_len_one():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 4, 50, generator=gen)
    cand = _follow_argmax(logits, torch.full((6,), 3), 50)  # every draft right
    out = _parity(greedy_accept, cand, logits, torch.ones(6, dtype=torch.int64))
    assert out.correct_len.tolist() == [0] * 6
    assert out.cap_trim.tolist() == [3] * 6
    assert out.bonus.tolist() == cand[:, 1].tolist()  # the bonus is the first (accepted) draft


@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_greedy_parity_gamma(gamma):
    gen = torch.Generator().manual_seed(gamma)
    bs, vocab = 9, 40
    logits = torch.randn(bs, gamma + 1, vocab, generator=gen)
    cand = _follow_argmax(logits, torch.randint(0, gamma + 1, (bs,), generator=gen), vocab)
    _parity(greedy_accept, cand, logits, torch.randint(1, gamma + 2, (bs,), generator=gen))


def test_greedy_parity_int32_inputs_and_empty_batch():
    logits = torch.randn(3, 3, 20, generator=torch.Generator().manual_seed(3))
    cand = _follow_argmax(logits, _ints(0, 1, 2), 20).to(torch.int32)
    _parity(greedy_accept, cand, logits, torch.tensor([3, 2, 1], dtype=torch.int32))
    _parity(greedy_accept, torch.zeros(0, 3, dtype=torch.int64), torch.zeros(0, 3, 20))


def test_greedy_padding_rows_are_ignored():
    """Rows past a request's verify length may hold anything (NaN included)."""
    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(4, 4, 30, generator=gen)
    cand = _follow_argmax(logits, _ints(3, 3, 1, 0), 30)
    lens = _ints(2, 1, 3, 4)
    clean = greedy_accept(cand, logits, lens, backend="torch")
    dirty = logits.clone()
    for b, n in enumerate(lens.tolist()):
        dirty[b, n:] = torch.randn(4 - n, 30, generator=gen) * 100
        dirty[b, n:, 7] = NAN
    got = _parity(greedy_accept, cand, dirty, lens)
    assert torch.equal(clean.correct_len, got.correct_len) and torch.equal(clean.bonus, got.bonus)


# --- sampling: hand-worked rows ------------------------------------------------------

_Q4 = [0.25] * 4
# gamma = 2, V = 4. Each row: candidates, target rows p0..p2, draft rows q0..q1,
# coins, resample noise, expected (correct_len, bonus).
_S_ROWS = [
    # Both drafts pass (.5*.25 < .4, .5*.25 < .25); the bonus comes from the last
    # target row and the noise decides it: [.1,.2,.3,.4] * [10,1,1,1] -> 0.
    ([0, 1, 2], [[.1, .4, .3, .2], _Q4, [.1, .2, .3, .4]], [_Q4, _Q4], [.5, .5], [10, 1, 1, 1], (2, 0)),
    # The coin rejects draft 2 at row 0 (.9*.6 >= .3); the residual max(p-q, 0)
    # holds a single token, 1, so the noise cannot change it.
    ([0, 2, 1], [[.1, .4, .3, .2], _Q4, _Q4], [[.1, .1, .6, .2], _Q4], [.9, 0.], [1, 1, 50, 50], (0, 1)),
    # q(draft) == 0 is rejected even with coin 0; residual [0,0,.3,.2] with noise
    # [1,1,1,2] draws 3, the rejected token itself.
    ([0, 3, 0], [[.1, .4, .3, .2], _Q4, _Q4], [[.5, .5, 0, 0], _Q4], [0., 0.], [1, 1, 1, 2], (0, 3)),
    # p == q and the draft has q == 0, so it is rejected and the residual has no
    # mass: the draw falls back to p, [.5,.5,0,0] * [1,3,1,1] -> 1.
    ([0, 3, 0], [[.5, .5, 0, 0], _Q4, _Q4], [[.5, .5, 0, 0], _Q4], [.1, .1], [1, 3, 1, 1], (0, 1)),
    # Disjoint supports: p(draft) == 0 rejects; the residual is p itself, so the
    # draw stays in p's support whatever the noise on q's tokens.
    ([0, 2, 2], [[.6, .4, 0, 0], _Q4, _Q4], [[0, 0, .5, .5], _Q4], [.3, .3], [1, 2, 9, 9], (0, 1)),
    # Accept at row 0; reject at row 1 (.99*.45 >= .2); residual at row 1 is
    # [.25,.25,0,0], noise [1,2,1,20] -> 1.
    ([0, 1, 2], [[.1, .4, .3, .2], [.5, .3, .2, 0], _Q4], [_Q4, [.25, .05, .45, .25]], [.5, .99], [1, 2, 1, 20],
     (1, 1)),
    # Strict inequality: u*q == p rejects (.5 * .5 == .25 at row 0).
    ([0, 1, 2], [[.25, .25, .25, .25], _Q4, _Q4], [[.1, .5, .2, .2], _Q4], [.5, .0], [1, 1, 1, 4], (0, 3)),
]


def _sampling_rows(dtype=torch.float32):
    cols = list(zip(*_S_ROWS))
    cand = torch.tensor(cols[0])
    p, q = torch.tensor(cols[1], dtype=dtype), torch.tensor(cols[2], dtype=dtype)
    coins, noise = torch.tensor(cols[3]), torch.tensor(cols[4], dtype=torch.float32)
    expected = torch.tensor(cols[5])
    return cand, p, q, coins, noise, expected


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_sampling_hand_rows(backend):
    cand, p, q, coins, noise, expected = _sampling_rows()
    out = _parity(sampling_accept, cand, p, q, coins, noise) if backend == "triton" else \
        sampling_accept(cand, p, q, coins, noise, backend="torch")
    assert out.correct_len.tolist() == expected[:, 0].tolist()
    assert out.bonus.tolist() == expected[:, 1].tolist()
    assert out.cap_trim.tolist() == [0] * len(_S_ROWS)


def test_sampling_cap_returns_accepted_draft():
    """Row 0 passes both drafts; a verify cap keeps fewer and carries the next passed draft."""
    cand, p, q, coins, noise, _ = _sampling_rows()
    take = [0, 0, 0, 1]
    args = (cand[take], p[take], q[take], coins[take], noise[take], _ints(3, 2, 1, 2))
    out = _parity(sampling_accept, *args)
    assert out.correct_len.tolist() == [2, 1, 0, 0]
    assert out.cap_trim.tolist() == [0, 1, 2, 0]
    assert out.bonus.tolist() == [0, 2, 1, 1]  # rows 1, 2: drafts; rows 0, 3: drawn


def test_sampling_one_hot_draft():
    """draft_probs=None: accept iff u < p(d); on rejection draw from p without d."""
    cand = _ints([0, 1, 2], [0, 1, 2], [0, 3, 3])
    # One law per request, the same at every position.
    p = torch.tensor([[.25, .5, .25, 0], [.1, .5, .3, .1], [.4, .3, .2, .1]])[:, None, :].expand(3, 3, 4).contiguous()
    coins = torch.tensor([[.5, .1], [.4999, .95], [0., 0.]])
    noise = torch.tensor([[1, 100, 2, 1], [1, 1, 1, 10], [1, 1, 1, 100.]])
    out = _parity(sampling_accept, cand, p, None, coins, noise)
    # row 0: .5 < .5 fails -> p without token 1, [.25,0,.25,0] * noise -> 2 (token 1's big noise is moot)
    # row 1: .4999 < .5 passes; .95 < .3 fails at row 1 -> p without token 2, [.1,.5,0,.1] * noise -> 3
    # row 2: coins 0 < p(3) = .1 pass twice -> bonus from row 2: [.4,.3,.2,.1] * [1,1,1,100] -> 3
    assert out.correct_len.tolist() == [0, 1, 2]
    assert out.bonus.tolist() == [2, 3, 3]


def test_sampling_one_hot_target_equal_to_drafts_accepts_all():
    gamma, vocab = 3, 20
    cand = _ints([4, 7, 1, 9], [0, 0, 0, 0])
    p = torch.nn.functional.one_hot(torch.cat([cand[:, 1:], _ints([5], [6])], 1), vocab).float()
    q = p[:, :gamma].clone()
    coins = torch.full((2, gamma), 0.999)
    noise = draw_resample_noise(2, vocab, generator=torch.Generator().manual_seed(0))
    for draft in (q, None):
        out = _parity(sampling_accept, cand, p, draft, coins, noise)
        assert out.correct_len.tolist() == [gamma, gamma] and out.bonus.tolist() == [5, 6]


# --- sampling: torch vs Triton --------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("one_hot", [False, True])
def test_sampling_parity_random(dtype, one_hot):
    vocab = 2 * _tile("sampling") + 19
    args = _rand_sampling_case(11, 10, 4, vocab, dtype=dtype, one_hot=one_hot, with_lens=True)
    _parity(sampling_accept, *args)


@pytest.mark.parametrize("gamma", [1, 2, 7])
def test_sampling_parity_gamma(gamma):
    args = _rand_sampling_case(gamma, 8, gamma, 37, with_lens=False)
    out = _parity(sampling_accept, *args)
    assert int(out.correct_len.max()) <= gamma


def test_sampling_parity_mixed_dtypes():
    """float64 in either probability input makes the whole computation float64."""
    cand, p, q, coins, noise, lens = _rand_sampling_case(4, 6, 3, 50, with_lens=True)
    _parity(sampling_accept, cand, p.double(), q, coins.double(), noise, lens)
    _parity(sampling_accept, cand, p.bfloat16(), q.double(), coins, noise.double(), lens)


def test_sampling_parity_ties_across_tile_boundary():
    """Equal scores on both sides of a tile edge: the earlier column is drawn."""
    tile = _tile("sampling")
    vocab = 2 * tile + 3
    p = torch.zeros(3, 2, vocab)
    p[:, 0, 0] = 1.0
    p[0, 1, [tile - 1, tile]] = 0.5
    p[1, 1, [tile, 2 * tile]] = 0.5
    p[2, 1, [5, tile + 5, 2 * tile + 2]] = 1 / 3
    cand = torch.zeros(3, 2, dtype=torch.int64)  # draft 0, p(0) = 1: accepted, bonus from row 1
    out = _parity(sampling_accept, cand, p, None, torch.zeros(3, 1), torch.ones(3, vocab))
    assert out.correct_len.tolist() == [1, 1, 1]
    assert out.bonus.tolist() == [tile - 1, tile, 5]


def test_sampling_parity_single_token_residual_far_tile():
    tile = _tile("sampling")
    vocab = 3 * tile
    hit = 2 * tile + 7
    p = torch.zeros(2, 2, vocab)
    q = torch.zeros(2, 1, vocab)
    p[:, 0, [1, hit]] = 0.5
    q[:, 0, 1] = 1.0  # q puts all mass on the draft; residual = p at `hit` only
    p[:, 1, 0] = 1.0
    cand = _ints([0, 1], [0, 1])
    noise = draw_resample_noise(2, vocab, generator=torch.Generator().manual_seed(2))
    out = _parity(sampling_accept, cand, p, q, torch.tensor([[.7], [.99]]), noise)
    assert out.correct_len.tolist() == [0, 0] and out.bonus.tolist() == [hit, hit]


def test_sampling_parity_empty_batch():
    _parity(sampling_accept, torch.zeros(0, 3, dtype=torch.int64), torch.zeros(0, 3, 5), torch.zeros(0, 2, 5),
            torch.zeros(0, 2), torch.ones(0, 5))


def test_sampling_padding_rows_are_ignored():
    """Target rows at or past a request's verify length are never read."""
    cand, p, q, coins, noise, _ = _rand_sampling_case(9, 6, 3, 40)
    lens = _ints(1, 2, 3, 4, 1, 2)
    clean = sampling_accept(cand, p, q, coins, noise, lens, backend="torch")
    dirty = p.clone()
    for b, n in enumerate(lens.tolist()):
        dirty[b, n:] = NAN
    got = _parity(sampling_accept, cand, dirty, q, coins, noise, lens)
    # cap_trim counts passes on unverified rows, so only it may change.
    assert torch.equal(clean.correct_len, got.correct_len) and torch.equal(clean.bonus, got.bonus)


# --- mixed batches and finalize ---------------------------------------------------------


def test_mixed_rows_match_their_op():
    gen = torch.Generator().manual_seed(21)
    bs, gamma, vocab = 10, 3, 60
    cand, p, q, coins, noise, lens = _rand_sampling_case(21, bs, gamma, vocab, with_lens=True)
    logits = torch.randn(bs, gamma + 1, vocab, generator=gen)
    cand = torch.where(torch.arange(bs)[:, None] % 2 == 0, _follow_argmax(logits, torch.arange(bs) % 4, vocab), cand)
    mask = torch.arange(bs) % 3 != 0
    p_dirty = torch.where(mask[:, None, None], torch.full_like(p, NAN), p)  # greedy rows' probs unread
    out = _parity(mixed_accept, cand, logits, p_dirty, q, coins, noise, mask, lens)
    greedy = greedy_accept(cand, logits, lens, backend="torch")
    sampled = sampling_accept(cand[~mask], p[~mask], q[~mask], coins[~mask], noise[~mask], lens[~mask],
                              backend="torch")
    for name in ("correct_len", "bonus", "cap_trim"):
        assert torch.equal(getattr(out, name)[mask], getattr(greedy, name)[mask])
        assert torch.equal(getattr(out, name)[~mask], getattr(sampled, name))


def test_finalize_hand_rows():
    drafts = _ints([7, 8, 9], [7, 8, 9], [7, 8, 9])
    accept = AcceptOut(torch.tensor([0, 2, 3], dtype=torch.int32), _ints(4, 5, 6), torch.zeros(3, dtype=torch.int32))
    out = _parity(finalize, _ints(10, 0, 3), drafts, accept)
    _assert_same(Finalized(torch.tensor([1, 3, 4], dtype=torch.int32), _ints(11, 3, 7),
                           _ints([4, -1, -1, -1], [7, 8, 5, -1], [7, 8, 9, 6])), out)


def test_finalize_parity_after_accept():
    cand, p, q, coins, noise, lens = _rand_sampling_case(30, 16, 5, 33, with_lens=True)
    accept = sampling_accept(cand, p, q, coins, noise, lens, backend="torch")
    prefix = torch.randint(0, 1000, (16,), generator=torch.Generator().manual_seed(0)).to(torch.int32)
    out = _parity(finalize, prefix, cand[:, 1:], accept)
    n = accept.correct_len.long()
    assert ((out.out_tokens != -1).sum(1) == out.commit_len.long()).all()
    assert torch.equal(out.out_tokens.gather(1, n[:, None])[:, 0], accept.bonus)


# --- bad input ----------------------------------------------------------------------------


def _greedy_kwargs():
    return dict(candidates=_ints([0, 1, 2], [3, 4, 0]), target_logits=torch.zeros(2, 3, 5), verify_lens=_ints(1, 3))


def _sampling_kwargs():
    p = torch.full((2, 3, 5), 0.2)
    return dict(candidates=_ints([0, 1, 2], [3, 4, 0]), target_probs=p, draft_probs=p[:, :2].clone(),
                coins=torch.full((2, 2), 0.5), resample_noise=torch.ones(2, 5), verify_lens=_ints(1, 3))


def _with(base, **changes):
    kw = base()
    for key, value in changes.items():
        kw[key] = value(kw) if callable(value) else value
    return kw


def _set(name, index, value):
    def change(kw):
        t = kw[name].clone()
        t[index] = value
        return t
    return change


_BAD_GREEDY = [
    ("candidates", TypeError, dict(candidates=lambda kw: kw["candidates"].float())),
    ("candidates", TypeError, dict(candidates=[[0, 1, 2], [3, 4, 0]])),
    ("candidates", ValueError, dict(candidates=_ints(0, 1, 2))),
    ("candidates", ValueError, dict(candidates=_ints([0], [1]), target_logits=torch.zeros(2, 1, 5))),
    ("candidates", ValueError, dict(candidates=_set("candidates", (1, 2), 5))),
    ("candidates", ValueError, dict(candidates=_set("candidates", (0, 0), -1))),
    ("target_logits", TypeError, dict(target_logits=torch.zeros(2, 3, 5, dtype=torch.int64))),
    ("target_logits", ValueError, dict(target_logits=torch.zeros(2, 4, 5))),
    ("target_logits", ValueError, dict(target_logits=torch.zeros(3, 3, 5))),
    ("target_logits", ValueError, dict(target_logits=torch.zeros(2, 3, 0))),
    ("verify_lens", ValueError, dict(verify_lens=_ints(0, 3))),
    ("verify_lens", ValueError, dict(verify_lens=_ints(1, 4))),
    ("verify_lens", ValueError, dict(verify_lens=_ints(1, 2, 3))),
    ("verify_lens", TypeError, dict(verify_lens=torch.tensor([1.0, 3.0]))),
]

_BAD_SAMPLING = [
    ("target_probs", ValueError, dict(target_probs=_set("target_probs", (1, 1, 2), 0.4))),  # row sums to 1.2
    ("target_probs", ValueError, dict(target_probs=_set("target_probs", (1, 0), torch.tensor([.6, .6, -.2, 0, 0])))),
    ("target_probs", ValueError, dict(target_probs=_set("target_probs", (1, 1, 4), NAN))),
    ("target_probs", ValueError, dict(target_probs=_set("target_probs", (1, 1, 4), INF))),
    ("target_probs", TypeError, dict(target_probs=lambda kw: kw["target_probs"].long())),
    ("target_probs", ValueError, dict(target_probs=torch.full((2, 2, 5), 0.2))),
    ("draft_probs", ValueError, dict(draft_probs=_set("draft_probs", (1, 1, 0), NAN))),
    ("draft_probs", ValueError, dict(draft_probs=_set("draft_probs", (1, 0, 0), 0.0))),  # sums to 0.8
    ("draft_probs", ValueError, dict(draft_probs=torch.full((2, 3, 5), 0.2))),
    ("draft_probs", ValueError, dict(draft_probs=torch.full((2, 2, 4), 0.25))),
    ("coins", ValueError, dict(coins=_set("coins", (0, 1), 1.0))),
    ("coins", ValueError, dict(coins=_set("coins", (1, 0), -0.1))),
    ("coins", ValueError, dict(coins=_set("coins", (1, 0), NAN))),
    ("coins", ValueError, dict(coins=torch.full((3, 2), 0.5))),
    ("coins", TypeError, dict(coins=torch.zeros(2, 2, dtype=torch.int64))),
    ("resample_noise", ValueError, dict(resample_noise=_set("resample_noise", (0, 3), 0.0))),
    ("resample_noise", ValueError, dict(resample_noise=_set("resample_noise", (1, 3), INF))),
    ("resample_noise", ValueError, dict(resample_noise=_set("resample_noise", (1, 3), -2.0))),
    ("resample_noise", ValueError, dict(resample_noise=torch.ones(2, 4))),
    ("candidates", ValueError, dict(candidates=_set("candidates", (1, 1), 5))),
    ("verify_lens", ValueError, dict(verify_lens=_ints(4, 1))),
]


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("name,exc,changes", _BAD_GREEDY, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(_BAD_GREEDY)])
def test_greedy_bad_input(name, exc, changes, backend, monkeypatch):
    _refuse_kernels(monkeypatch)
    with pytest.raises(exc, match=rf"^{name}:"):
        greedy_accept(**_with(_greedy_kwargs, **changes), backend=backend)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("name,exc,changes", _BAD_SAMPLING,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(_BAD_SAMPLING)])
def test_sampling_bad_input(name, exc, changes, backend, monkeypatch):
    _refuse_kernels(monkeypatch)
    with pytest.raises(exc, match=rf"^{name}:"):
        sampling_accept(**_with(_sampling_kwargs, **changes), backend=backend)


def _refuse_kernels(monkeypatch):
    """Make any kernel launch fail loudly, proving validation ran first."""
    from dspark.verify import triton_kernels

    def boom(*args, **kwargs):
        raise AssertionError("a kernel ran before validation rejected the input")

    for module in (reference, triton_kernels):
        for op in ("greedy_accept", "sampling_accept", "finalize"):
            monkeypatch.setattr(module, op, boom)


def test_mixed_and_finalize_bad_input(monkeypatch):
    _refuse_kernels(monkeypatch)
    s = _sampling_kwargs()
    kw = dict(s, target_logits=torch.zeros(2, 3, 5), greedy_mask=torch.tensor([True, False]))
    with pytest.raises(TypeError, match="^greedy_mask:"):
        mixed_accept(**dict(kw, greedy_mask=torch.tensor([1, 0])))
    with pytest.raises(ValueError, match="^greedy_mask:"):
        mixed_accept(**dict(kw, greedy_mask=torch.tensor([True])))
    with pytest.raises(ValueError, match="^target_probs:"):
        mixed_accept(**dict(kw, target_logits=torch.zeros(2, 3, 6)))
    with pytest.raises(ValueError, match="^backend:"):
        mixed_accept(**kw, backend="cuda")
    accept = AcceptOut(torch.tensor([0, 2], dtype=torch.int32), _ints(1, 2), torch.zeros(2, dtype=torch.int32))
    drafts = _ints([1, 2], [3, 4])
    with pytest.raises(ValueError, match="^prefix_lens:"):
        finalize(_ints(-1, 0), drafts, accept)
    with pytest.raises(ValueError, match="^drafts:"):
        finalize(_ints(0, 0), _ints([1, 2]), accept)
    with pytest.raises(TypeError, match="^accept:"):
        finalize(_ints(0, 0), drafts, (accept.correct_len, accept.bonus, accept.cap_trim))
    with pytest.raises(ValueError, match=r"^accept\.correct_len:"):
        finalize(_ints(0, 0), drafts, dataclasses.replace(accept, correct_len=torch.tensor([0, 3], dtype=torch.int32)))


def test_check_false_skips_value_checks_only():
    kw = _with(_sampling_kwargs, coins=_set("coins", (0, 1), 1.0))
    sampling_accept(**kw, backend="torch", check=False)
    with pytest.raises(ValueError, match="^coins:"):
        sampling_accept(**dict(kw, coins=torch.zeros(2, 3)), backend="torch", check=False)


# --- oracle ----------------------------------------------------------------------------------


def test_first_token_law_is_target():
    gen = torch.Generator().manual_seed(0)
    p = _rand_probs(gen, 50, 9, dtype=torch.float64, sparsity=0.4)
    q = _rand_probs(gen, 50, 9, dtype=torch.float64, sparsity=0.4)
    q[0] = p[0]  # residual without mass
    q[1] = torch.nn.functional.one_hot(torch.tensor(3), 9)  # one-hot draft
    torch.testing.assert_close(oracle.first_token_law(p, q), p, rtol=0, atol=1e-12)


def _toys(vocab=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    target = oracle.markov(_rand_probs(gen, vocab, vocab, dtype=torch.float64, sparsity=0.3))
    draft = oracle.markov(_rand_probs(gen, vocab, vocab, dtype=torch.float64, sparsity=0.3))
    one_hot = oracle.markov(torch.eye(vocab, dtype=torch.float64).roll(1, 0))
    return target, draft, one_hot


@pytest.mark.parametrize("verify_len", [None, 1, 2, 3])
@pytest.mark.parametrize("which", ["sampled", "one_hot", "target"])
def test_block_law_is_lossless(verify_len, which):
    target, draft, one_hot = _toys()
    proposer = {"sampled": draft, "one_hot": one_hot, "target": target}[which]
    gamma, prefix = 3, (1,)
    block = oracle.emitted_block_law(target, proposer, gamma, prefix=prefix, verify_len=verify_len)
    assert math.isclose(sum(block.values()), 1.0, abs_tol=1e-12)
    assert max(map(len, block)) <= (gamma + 1 if verify_len is None else verify_len)
    completed = oracle.complete_with_target(block, target, prefix, gamma + 1)
    assert oracle.total_variation(completed, oracle.continuation_law(target, prefix, gamma + 1)) < 1e-12


def test_block_law_draft_equal_target_accepts_everything():
    target, _, _ = _toys(seed=3)
    block = oracle.emitted_block_law(target, target, 2, prefix=(0,))
    assert all(len(k) == 3 for k in block)


def test_block_law_detects_a_lossy_rule():
    """Negative control: a law that skips the residual (resamples from p) is not lossless."""
    target, draft, _ = _toys(seed=4)
    law = oracle.emitted_block_law(target, draft, 1, prefix=(2,))
    p, q = target((2,)), draft((2,))
    # Replace the residual draws with plain p draws at the first position.
    take = torch.minimum(p, q)
    lossy = {(x,): float(take[x] + (1 - take.sum()) * p[x]) for x in range(3)}
    assert oracle.total_variation(lossy, oracle.continuation_law(target, (2,), 1)) > 1e-3
    first = {}
    for k, v in law.items():
        first[k[:1]] = first.get(k[:1], 0.0) + v
    assert oracle.total_variation(first, oracle.continuation_law(target, (2,), 1)) < 1e-12


def test_accept_count_law_matches_enumeration():
    gen = torch.Generator().manual_seed(8)
    gamma, vocab = 3, 4
    p = _rand_probs(gen, gamma + 1, vocab, dtype=torch.float64, sparsity=0.3)
    q = _rand_probs(gen, gamma, vocab, dtype=torch.float64, sparsity=0.3)
    block = oracle.emitted_block_law(oracle.positional(p), oracle.positional(q), gamma)
    by_len = [0.0] * (gamma + 1)
    for k, v in block.items():
        by_len[len(k) - 1] += v
    torch.testing.assert_close(oracle.accept_count_law(p, q), torch.tensor(by_len, dtype=torch.float64),
                               rtol=0, atol=1e-12)


@pytest.mark.stat
def test_sampling_reference_matches_law_statistically():
    """Torch reference vs the exact laws at a fixed seed (distribution-free TV bound, delta = 1e-6)."""
    gen = torch.Generator().manual_seed(2024)
    n, gamma, vocab = 40_000, 3, 6
    p_rows = _rand_probs(gen, gamma + 1, vocab, dtype=torch.float64, sparsity=0.2)
    q_rows = _rand_probs(gen, gamma, vocab, dtype=torch.float64, sparsity=0.2)
    drafts = torch.stack([torch.multinomial(q_rows[k], n, replacement=True, generator=gen) for k in range(gamma)], 1)
    cand = torch.cat([torch.zeros(n, 1, dtype=torch.int64), drafts], 1)
    out = sampling_accept(cand, p_rows.expand(n, -1, -1), q_rows.expand(n, -1, -1),
                          draw_coins(n, gamma, generator=gen, dtype=torch.float64),
                          draw_resample_noise(n, vocab, generator=gen, dtype=torch.float64), backend="torch")
    tokens = finalize(torch.zeros(n, dtype=torch.int64), drafts, out).out_tokens

    def tv_bound(cells, count):
        return 0.5 * math.sqrt((cells - 1) / count) + math.sqrt(math.log(1e6) / (2 * count))

    lengths = torch.bincount(out.correct_len.long(), minlength=gamma + 1).double() / n
    law = oracle.accept_count_law(p_rows, q_rows)
    assert 0.5 * (lengths - law).abs().sum() < tv_bound(gamma + 1, n)
    for k in range(gamma + 1):
        emitted = tokens[:, k][tokens[:, k] >= 0]
        freq = torch.bincount(emitted, minlength=vocab).double() / emitted.numel()
        assert 0.5 * (freq - p_rows[k]).abs().sum() < tv_bound(vocab, emitted.numel()), f"position {k}"


# --- Hypothesis: structural invariants on random small cases --------------------------------

@st.composite
def _greedy_cases(draw):
    bs = draw(st.integers(1, 5), label="bs")
    gamma = draw(st.integers(1, 6), label="gamma")
    vocab = draw(st.sampled_from([1, 2, 3, 7, 2 * 128 + 1]), label="vocab")
    seed = draw(st.integers(0, 2**31 - 1), label="seed")
    gen = torch.Generator().manual_seed(seed)
    # Few distinct values, so ties are everywhere.
    logits = torch.randint(0, 3, (bs, gamma + 1, vocab), generator=gen).to(draw(st.sampled_from(FLOATS)))
    pred = logits.float().argmax(-1)
    random = torch.randint(0, vocab, (bs, gamma + 1), generator=gen)
    follow = torch.rand(bs, gamma, generator=gen) < 0.8
    cand = torch.cat([random[:, :1], torch.where(follow, pred[:, :-1], random[:, 1:])], 1)
    lens = torch.randint(1, gamma + 2, (bs,), generator=gen) if draw(st.booleans(), label="capped") else None
    return cand, logits, lens


@given(case=_greedy_cases())
def test_greedy_invariants(case):
    cand, logits, lens = case
    bs, width, _ = logits.shape
    out = greedy_accept(cand, logits, lens, backend="torch")
    pred = logits.argmax(-1)
    n = out.correct_len.long()
    cap = torch.full((bs,), width) if lens is None else lens
    assert ((0 <= n) & (n <= cap - 1)).all() and (out.cap_trim >= 0).all()
    assert (n + out.cap_trim <= width - 1).all()
    assert torch.equal(out.bonus, pred.gather(1, n[:, None])[:, 0])
    for b in range(bs):  # accepted drafts are the target's greedy picks
        assert torch.equal(cand[b, 1:n[b] + 1], pred[b, :n[b]])
    trimmed = out.cap_trim > 0
    assert torch.equal(out.bonus[trimmed], cand[trimmed, n[trimmed] + 1])
    fin = finalize(torch.zeros(bs, dtype=torch.int64), cand[:, 1:], out, backend="torch")
    assert torch.equal((fin.out_tokens != -1).sum(1), fin.commit_len.long())


@settings(max_examples=12, deadline=None)  # each example runs the Triton interpreter
@given(case=_greedy_cases())
def test_greedy_parity_property(case):
    _parity(greedy_accept, *case)
