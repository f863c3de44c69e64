"""Result records of the verify/accept ops.

Plain frozen dataclasses of tensors, so parity tests can compare them field by
field and CUDA-graph code can hold on to the very tensors a kernel wrote.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AcceptOut:
    """What one verify step decided for each request row.

    correct_len: int32 [bs], accepted drafts after the verify cap, in [0, gamma].
    bonus:       int64 [bs], the target-supplied token emitted after them.
    cap_trim:    int32 [bs], drafts that passed but fell past the verify cap
                 (raw accepted count - correct_len); all zero without a cap.
                 Past the cap it reads rows the target may not have computed
                 (compact verify), so it is a metric there, not a decision.
    """

    correct_len: torch.Tensor
    bonus: torch.Tensor
    cap_trim: torch.Tensor


@dataclass(frozen=True)
class Finalized:
    """Commit bookkeeping derived from an AcceptOut.

    commit_len:   int32 [bs] = correct_len + 1 (anchor plus accepted drafts).
    new_seq_lens: int64 [bs] = prefix_lens + commit_len.
    out_tokens:   int64 [bs, gamma+1]: accepted drafts, then the bonus, then -1.
    """

    commit_len: torch.Tensor
    new_seq_lens: torch.Tensor
    out_tokens: torch.Tensor
