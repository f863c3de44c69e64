"""Verify level on SGLang."""

from __future__ import annotations

import torch

from contracts.adapters.sglang.runtime import runtime
from contracts.boundary.verify import AcceptResult, CommitResult, VerifyInputs


class SGLangVerify:
    def _ops(self):
        runtime()
        from sglang.kernels.ops.speculative.dspark import blockwise_rejection, dspark_accept, dspark_verify_window

        return dspark_accept, dspark_verify_window, blockwise_rejection

    def greedy_accept(self, inputs: VerifyInputs) -> AcceptResult:
        accept, _, _ = self._ops()
        bs, T = inputs.candidates.shape
        cutoff = None if inputs.verify_lens is None else inputs.verify_lens.to(torch.int32)
        correct, bonus, trim = accept.AcceptGreedy.execute(
            candidates=inputs.candidates, target_logits=inputs.target_logits.reshape(bs * T, inputs.target_logits.shape[-1]),
            verify_num_draft_tokens=T, cutoff_verify_lens=cutoff)
        return AcceptResult(correct, bonus, torch.zeros_like(correct) if trim is None else trim)

    def finalize(self, inputs: VerifyInputs, accept: AcceptResult) -> CommitResult:
        accept_ops, window, _ = self._ops()
        lens = accept_ops.FinalizeAcceptLens.execute(correct_len=accept.correct_len, cap_trim_lens=accept.cap_trim,
                                                     prefix_lens=inputs.prefix_lens)
        out = window.BuildOutTokens.execute(draft_tokens=inputs.drafts, correct_len=accept.correct_len, bonus=accept.bonus,
                                            verify_num_draft_tokens=inputs.gamma + 1, gamma=inputs.gamma)
        return CommitResult(lens.commit_lens, lens.new_seq_lens, out)

    def sample_block(self, inputs: VerifyInputs, seed: int) -> AcceptResult:
        """SGLang's block-wise rejection (torch reference), keyed by `seed`; probabilities enter as log-probabilities."""
        _, _, blockwise = self._ops()
        bs = inputs.bs
        ones = torch.ones(bs, dtype=torch.float32)
        draft_logits = None if inputs.draft_probs is None else torch.log(inputs.draft_probs.float())
        noise = blockwise.RejectionNoise(key=int(seed), counter=torch.zeros(1, dtype=torch.int64))
        correct, bonus, trim = blockwise.blockwise_rejection_torch(
            candidates=inputs.candidates, target_logits=torch.log(inputs.target_probs.float()), draft_logits=draft_logits,
            target_temperatures=ones, draft_temperatures=ones, noise=noise, cutoff_verify_lens=inputs.verify_lens)
        return AcceptResult(correct, bonus, trim)
