"""The toy models: deterministic, pure functions of the prefix, drafts that never feed back into base logits or earlier confidences."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.machine import single_thread
from dspark.dspark_draft import DraftBlockProposer
from dspark.toy_models import (
    DRAFTERS,
    MARKOV_HEADS,
    OracleDrafter,
    RandomDrafter,
    ToyDrafter,
    ToyTarget,
    make_drafter,
    target_greedy_decode,
)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with single_thread():  # small float64 tensors run faster and steadier on one intra-op thread
        yield


V = 8
TARGET = ToyTarget(V, seed=3)


def _gumbel(bs, gamma, seed):
    g = torch.Generator().manual_seed(seed)
    return -torch.empty(bs, gamma, V, dtype=torch.float64).exponential_(generator=g).log()


def test_same_seed_same_model_other_seed_other_model():
    a, b, c = ToyTarget(V, seed=1), ToyTarget(V, seed=1), ToyTarget(V, seed=2)
    assert torch.equal(a.A, b.A) and torch.equal(a.C, b.C) and not torch.equal(a.A, c.A)
    assert torch.equal(ToyDrafter(a).W2, ToyDrafter(b).W2)


@given(st.lists(st.integers(0, V - 1), min_size=0, max_size=6), st.lists(st.integers(0, V - 1), min_size=1, max_size=5))
def test_forward_row_i_is_the_law_after_the_prefix(context, new):
    logits, hidden = TARGET.forward(context, new)
    assert logits.shape == (len(new), V) and hidden.shape == (len(new), TARGET.hidden_size)
    for i in range(len(new)):
        assert torch.equal(logits[i], TARGET.next_logits(context + new[: i + 1]))


def test_target_depends_on_the_last_two_tokens_only():
    assert torch.equal(TARGET.next_logits([5, 1, 2]), TARGET.next_logits([0, 1, 2]))
    assert not torch.equal(TARGET.next_logits([1, 2]), TARGET.next_logits([3, 2]))


@pytest.mark.parametrize("head", MARKOV_HEADS)
@settings(max_examples=20)
@given(k=st.integers(0, 3), seed_a=st.integers(0, 99), seed_b=st.integers(0, 99))
def test_drafts_past_k_never_change_confidence_up_to_k(head, k, seed_a, seed_b):
    """c_k reads (h_k, d_k) only; replacing the noise after position k changes later drafts, never c_0..c_k."""
    drafter = ToyDrafter(TARGET, markov_head=head)
    ctx = [torch.randn(3, TARGET.hidden_size, dtype=torch.float64, generator=torch.Generator().manual_seed(1))]
    anchors, temps = torch.tensor([2]), torch.tensor([1.0], dtype=torch.float64)
    g1, g2 = _gumbel(1, 4, seed_a), _gumbel(1, 4, seed_b)
    g2[:, : k + 1] = g1[:, : k + 1]
    t1, l1, c1 = drafter.draft_block([[0]], ctx, anchors, 4, temps, g1, 4)
    t2, l2, c2 = drafter.draft_block([[0]], ctx, anchors, 4, temps, g2, 4)
    assert torch.equal(t1[:, : k + 1], t2[:, : k + 1])
    assert torch.equal(c1[:, : k + 1], c2[:, : k + 1]) and torch.equal(l1[:, : k + 1], l2[:, : k + 1])
    assert bool(((c1 >= 0) & (c1 <= 1)).all())


def test_base_logits_never_read_the_drafts():
    drafter = ToyDrafter(TARGET)
    ctx = [torch.zeros(2, TARGET.hidden_size, dtype=torch.float64)]
    h = drafter.block_hidden(ctx, torch.tensor([3]), 4)
    assert h.shape == (1, 4, TARGET.hidden_size)  # a function of context and anchor only: there is no draft input


def test_greedy_drafts_are_the_argmax_of_their_step_logits():
    drafter = ToyDrafter(TARGET, markov_head="gated")
    tokens, logits, _ = drafter.draft_block([[0]], [torch.zeros(1, TARGET.hidden_size, dtype=torch.float64)],
                                            torch.tensor([1]), 3, torch.zeros(1, dtype=torch.float64), _gumbel(1, 3, 0), 3)
    assert torch.equal(tokens, logits.argmax(-1))


def test_oracle_drafts_the_target_greedy_chain():
    context = [4, 1, 6]
    tokens, _, conf = OracleDrafter(TARGET).draft_block([context[:-1]], [None], torch.tensor([context[-1]]), 4,
                                                       torch.zeros(1, dtype=torch.float64), _gumbel(1, 4, 0), 4)
    assert tokens[0].tolist() == target_greedy_decode(TARGET, context, 4)
    assert conf.shape == (1, 4)


def test_random_drafter_is_uniform_and_seeded():
    noise = _gumbel(2, 3, 1)

    def draft(seed):
        return RandomDrafter(V, seed=seed).draft_block([[0]] * 2, [None] * 2, torch.tensor([0, 1]), 3,
                                                       torch.ones(2, dtype=torch.float64), noise, 3)

    tokens, logits, conf = draft(5)
    assert torch.equal(logits, torch.zeros(2, 3, V, dtype=torch.float64))
    # Gumbel-max over flat logits: each draft is its noise row's argmax, a uniform draw.
    assert torch.equal(tokens, noise.argmax(dim=-1))
    assert 0 <= float(conf.min()) and float(conf.max()) <= 1
    assert torch.equal(conf, draft(5)[2]) and not torch.equal(conf, draft(6)[2])  # a function of the seed


@pytest.mark.parametrize("kind", DRAFTERS)
@pytest.mark.parametrize("sample_from_anchor", [True, False])
def test_proposer_shapes(kind, sample_from_anchor):
    proposer = DraftBlockProposer(3, mask_token_id=V - 1, sample_from_anchor=sample_from_anchor)
    ctx = [torch.zeros(2, TARGET.hidden_size, dtype=torch.float64)] * 2
    out = proposer.propose(make_drafter(kind, TARGET), [[0, 1], [2, 3]], ctx, torch.tensor([1, 2]),
                           torch.tensor([0.0, 1.0], dtype=torch.float64), _gumbel(2, 3, 2))
    assert out.draft_tokens.shape == (2, 3) and out.draft_tokens.dtype == torch.int64
    assert out.step_logits.shape == (2, 3, V) and out.confidence.shape == (2, 3)


def test_proposer_rejects_wrong_noise_shape():
    proposer = DraftBlockProposer(3)
    with pytest.raises(ValueError, match="gumbel"):
        proposer.propose(make_drafter("vanilla", TARGET), [[0]], [torch.zeros(1, 8, dtype=torch.float64)], torch.tensor([1]),
                         torch.zeros(1, dtype=torch.float64), _gumbel(1, 2, 0))


def test_bad_drafter_settings():
    with pytest.raises(ValueError, match="markov_head"):
        ToyDrafter(TARGET, markov_head="lstm")
    with pytest.raises(ValueError, match="sts_temperatures"):
        ToyDrafter(TARGET, sts_temperatures=[1.0, 0.0])
    with pytest.raises(ValueError, match="drafter"):
        make_drafter("eagle", TARGET)
