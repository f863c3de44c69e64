"""vLLM V2 (vllm-dspark) beyond the boundary's single-kind, single-step calls: greedy and sampled requests in one
batch, and the same requests over consecutive steps, as the V2 model runner runs them.

Oracles (independent of vLLM's code): a request's result does not depend on whether its batch companions are greedy
(V2 keys every draw by the request's own seed and position); greedy rows ignore randomness; a whole multi-step session
repeats exactly from the same seed; the randomness moves on between steps (the same inputs at the next positions do
not replay the same draws on a high-entropy batch); and V2 carries nothing between steps but the seed, so a later
step equals that step verified alone at its positions.
"""

import torch

from contracts.boundary.verify import VerifyCase
from contracts.strategies.verify import build

CASE = VerifyCase(bs=12, gamma=3, vocab=24, target_family="dense", draft_family="dense", draft_mode="sampled", seed=11,
                  greedy=tuple(i % 3 == 0 for i in range(12)), dtype="float32", temperature=1.0)
SEED = 1234


def _rows(result):
    return torch.stack([result.correct_len.to(torch.int64), result.bonus.to(torch.int64)], 1)


def test_mixed_batch_rows_match_their_single_kind_calls(vllm_dspark_engine):
    inputs = build(CASE)
    greedy = inputs.greedy_mask
    mixed = vllm_dspark_engine.mixed_block(inputs, SEED)
    commit = vllm_dspark_engine.finalize(inputs, mixed)
    alone_greedy = vllm_dspark_engine.greedy_accept(inputs)
    alone_sampled = vllm_dspark_engine.sample_block(inputs, SEED)
    assert torch.equal(_rows(mixed)[greedy], _rows(alone_greedy)[greedy])
    assert torch.equal(_rows(mixed)[~greedy], _rows(alone_sampled)[~greedy])
    assert torch.equal(commit.commit_len.to(torch.int64), mixed.correct_len.to(torch.int64) + 1)


def _advanced(inputs, accept):
    """The same requests one step later: the committed tokens moved the positions on; the drafts and laws stay."""
    return inputs.replace(prefix_lens=inputs.prefix_lens + accept.correct_len.to(torch.int64) + 1)


def test_consecutive_steps_repeat_advance_and_carry_only_the_seed(vllm_dspark_engine):
    first = build(CASE)
    step1 = vllm_dspark_engine.mixed_block(first, SEED)
    second = _advanced(first, step1)
    session = vllm_dspark_engine.consecutive_blocks([first, second], SEED)
    again = vllm_dspark_engine.consecutive_blocks([first, second], SEED)
    greedy = first.greedy_mask
    for a, b in zip(session, again):  # the whole session repeats from the seed
        assert torch.equal(_rows(a), _rows(b))
    assert torch.equal(_rows(session[0]), _rows(step1))  # step 1 of a session is the single step
    # Greedy rows ignore randomness; sampled rows draw anew at the new positions (same inputs, other draws).
    assert torch.equal(_rows(session[1])[greedy], _rows(session[0])[greedy])
    assert not torch.equal(_rows(session[1])[~greedy], _rows(session[0])[~greedy])
    # V2 keeps only the seed: step 2 of the session is step 2 verified alone at its positions.
    assert torch.equal(_rows(session[1]), _rows(vllm_dspark_engine.mixed_block(second, SEED)))
