from __future__ import annotations

import torch

import dspark.verify as dv  # looked up at call time, so a patched op is what the contracts see
from contracts.boundary.verify import AcceptDistributions, AcceptResult, CommitResult, VerifyInputs
from dspark import sampling


def _accept(out) -> AcceptResult:
    return AcceptResult(out.correct_len, out.bonus, out.cap_trim)


def _target(inputs: VerifyInputs) -> torch.Tensor:
    """The target law the engine builds from the logits and the rows' settings (the given law when none are set)."""
    if inputs.temperatures is None:
        return inputs.target_probs
    ks = [0] * inputs.bs if inputs.top_k is None else inputs.top_k.tolist()
    ps = [1.0] * inputs.bs if inputs.top_p is None else inputs.top_p.tolist()
    probs = sampling.target_probs(inputs.target_logits, inputs.temperatures.tolist(), ks, ps)
    return probs.to(inputs.target_probs.dtype)


class ReferenceVerify:
    def greedy_accept(self, inputs: VerifyInputs) -> AcceptResult:
        return _accept(dv.greedy_accept(inputs.candidates, inputs.target_logits, inputs.verify_lens))

    def sampling_accept(self, inputs: VerifyInputs) -> AcceptResult:
        return _accept(dv.sampling_accept(inputs.candidates, _target(inputs), inputs.draft_probs, inputs.coins,
                                          inputs.resample_noise, inputs.verify_lens))

    def mixed_accept(self, inputs: VerifyInputs) -> AcceptResult:
        return _accept(dv.mixed_accept(inputs.candidates, inputs.target_logits, _target(inputs), inputs.draft_probs,
                                       inputs.coins, inputs.resample_noise, inputs.greedy_mask, inputs.verify_lens))

    def finalize(self, inputs: VerifyInputs, accept: AcceptResult) -> CommitResult:
        out = dv.finalize(inputs.prefix_lens, inputs.drafts, dv.AcceptOut(accept.correct_len, accept.bonus, accept.cap_trim))
        return CommitResult(out.commit_len, out.new_seq_lens, out.out_tokens)

    def sample_block(self, inputs: VerifyInputs, seed: int) -> AcceptResult:
        gen = torch.Generator().manual_seed(seed)
        dtype = torch.float64 if inputs.target_probs.dtype == torch.float64 else torch.float32
        coins = dv.draw_coins(inputs.bs, inputs.gamma, generator=gen, dtype=dtype)
        noise = dv.draw_resample_noise(inputs.bs, inputs.vocab, generator=gen, dtype=dtype)
        return self.sampling_accept(inputs.replace(coins=coins, resample_noise=noise))

    def accept_distributions(self, inputs: VerifyInputs) -> AcceptDistributions:
        return AcceptDistributions(_target(inputs), inputs.draft_probs)
