"""vLLM V2 (vllm-dspark) over consecutive steps, beyond what VERIFY-013..016 hold every engine to (those run in
test_contracts_budget.py): V2 carries nothing between steps but each request's seed, keying every draw by (seed,
position), so a later step of a session equals that step verified alone at its positions.
"""

import torch

from contracts.boundary.verify import VerifyCase
from contracts.strategies.verify import build

CASE = VerifyCase(bs=12, gamma=3, vocab=24, target_family="dense", draft_family="dense", draft_mode="sampled", seed=11,
                  greedy=tuple(i % 3 == 0 for i in range(12)), dtype="float32", temperature=1.0)
SEED = 1234


def _rows(result):
    return torch.stack([result.correct_len.to(torch.int64), result.bonus.to(torch.int64)], 1)


def test_a_later_step_is_that_step_alone_since_v2_carries_only_the_seed(vllm_dspark_engine):
    first = build(CASE)
    step1 = vllm_dspark_engine.mixed_block(first, SEED)
    # The same requests one step later: the committed tokens moved the positions on; the drafts and laws stay.
    second = first.replace(prefix_lens=first.prefix_lens + step1.correct_len.to(torch.int64) + 1)
    session = vllm_dspark_engine.consecutive_blocks([first, second], SEED)
    assert torch.equal(_rows(session[1]), _rows(vllm_dspark_engine.mixed_block(second, SEED)))
