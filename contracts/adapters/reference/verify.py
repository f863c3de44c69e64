"""The verify level on `dspark.verify`: the torch reference or the Triton kernels, on the CPU or a CUDA device.

`device` and `backend` are the adapter's (`ReferenceAdapter(device=..., backend=...)`, from `--device` and
`--backend`): the case tensors cross the boundary on the CPU, move to `device` for the op and come back, and every
op is called with `backend=` ("torch" or "triton", never "auto", so the run is what the report names). With
`backend="triton"` on the CPU the kernels run in Triton's interpreter. Substituted: nothing; the coins and noise of
`sample_block` are drawn on the CPU (a seeded CPU generator), so a seed means the same randomness on every device.
"""

from __future__ import annotations

import collections
import dataclasses

import torch

import dspark.verify as dv  # looked up at call time, so a patched op is what the contracts see
from contracts.boundary.verify import AcceptDistributions, AcceptResult, CommitResult, RequestVerifyCase, VerifyInputs
from dspark import penalties, sampling
from dspark.engine_types import SamplingParams

CPU = torch.device("cpu")
_Ledgered = collections.namedtuple("_Ledgered", "params ledger")  # what process_block reads of a request's state


def _move(obj, device: torch.device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if dataclasses.is_dataclass(obj):
        return type(obj)(**{f.name: _move(getattr(obj, f.name), device) for f in dataclasses.fields(obj)})
    return obj


def _target(inputs: VerifyInputs) -> torch.Tensor:
    """The target law the engine builds from the logits and the rows' settings (the given law when none are set)."""
    if inputs.temperatures is None:
        return inputs.target_probs
    settings = inputs.sampling_settings()
    probs = sampling.target_probs(inputs.target_logits, [s[0] for s in settings], [s[1] for s in settings],
                                  [s[2] for s in settings])
    return probs.to(inputs.target_probs.dtype)


class ReferenceVerify:
    device = "cpu"
    backend = "torch"

    def _on_device(self, *tensors):
        where = torch.device(self.device)
        return tuple(None if t is None else t.to(where) for t in tensors)

    def _accept(self, out) -> AcceptResult:
        out = _move(out, CPU)
        return AcceptResult(out.correct_len, out.bonus, out.cap_trim)

    def verify_requests(self, case: RequestVerifyCase) -> list:
        """What `Engine.step` does to a greedy block: the parameters per column (`penalties.process_block`, each
        request's ledger of its output), then the greedy accept with each row's verify length."""
        bs, width = len(case.rows), 1 + case.gamma  # the verify length cuts each row's block
        cand = torch.zeros(bs, width, dtype=torch.int64)
        logits = torch.zeros(bs, width, case.vocab, dtype=torch.float64)
        states = []
        for i, row in enumerate(case.rows):
            n, r = len(row.drafts), row.request
            cand[i, : n + 1] = torch.tensor((row.output[-1],) + row.drafts)
            logits[i, : n + 1] = torch.tensor(row.logits, dtype=torch.float64)
            params = SamplingParams(0.0, 0, r.max_new_tokens, r.eos_id, 1.0, r.frequency_penalty, r.presence_penalty,
                                    r.repetition_penalty, r.min_new_tokens, 0.0, r.logit_bias, r.stop_token_ids)
            states.append(_Ledgered(params, penalties.PenaltyLedger.of(case.vocab, row.output)))
        lens = torch.tensor([len(r.drafts) + 1 for r in case.rows], dtype=torch.int32)
        logits = penalties.process_block(logits, cand, states)
        out = _move(dv.greedy_accept(*self._on_device(cand, logits, lens), backend=self.backend), CPU)
        return [list(row.drafts[: int(c)]) + [int(b)] for row, c, b in zip(case.rows, out.correct_len, out.bonus)]

    def greedy_accept(self, inputs: VerifyInputs) -> AcceptResult:
        args = self._on_device(inputs.candidates, inputs.target_logits, inputs.verify_lens)
        return self._accept(dv.greedy_accept(*args, backend=self.backend))

    def sampling_accept(self, inputs: VerifyInputs) -> AcceptResult:
        args = self._on_device(inputs.candidates, _target(inputs), inputs.draft_probs, inputs.coins,
                               inputs.resample_noise, inputs.verify_lens)
        return self._accept(dv.sampling_accept(*args, backend=self.backend))

    def mixed_accept(self, inputs: VerifyInputs) -> AcceptResult:
        args = self._on_device(inputs.candidates, inputs.target_logits, _target(inputs), inputs.draft_probs,
                               inputs.coins, inputs.resample_noise, inputs.greedy_mask, inputs.verify_lens)
        return self._accept(dv.mixed_accept(*args, backend=self.backend))

    def finalize(self, inputs: VerifyInputs, accept: AcceptResult) -> CommitResult:
        prefix, drafts, correct, bonus, trim = self._on_device(inputs.prefix_lens, inputs.drafts, accept.correct_len,
                                                               accept.bonus, accept.cap_trim)
        out = _move(dv.finalize(prefix, drafts, dv.AcceptOut(correct, bonus, trim), backend=self.backend), CPU)
        return CommitResult(out.commit_len, out.new_seq_lens, out.out_tokens)

    @staticmethod
    def _drawn(inputs: VerifyInputs, gen: torch.Generator) -> VerifyInputs:
        """The inputs with coins and resample noise drawn from `gen` (the engine's randomness), in that order."""
        dtype = torch.float64 if inputs.target_probs.dtype == torch.float64 else torch.float32
        coins = dv.draw_coins(inputs.bs, inputs.gamma, generator=gen, dtype=dtype)
        return inputs.replace(coins=coins, resample_noise=dv.draw_resample_noise(inputs.bs, inputs.vocab, generator=gen,
                                                                                  dtype=dtype))

    def sample_block(self, inputs: VerifyInputs, seed: int) -> AcceptResult:
        return self.sampling_accept(self._drawn(inputs, torch.Generator().manual_seed(seed)))

    def mixed_block(self, inputs: VerifyInputs, seed: int) -> AcceptResult:
        return self.mixed_accept(self._drawn(inputs, torch.Generator().manual_seed(seed)))

    def consecutive_blocks(self, steps, seed: int) -> list:
        """One generator for the session, seeded once: each step draws on from where the step before stopped."""
        gen = torch.Generator().manual_seed(seed)
        return [self.mixed_accept(self._drawn(inputs, gen)) for inputs in steps]

    def accept_distributions(self, inputs: VerifyInputs) -> AcceptDistributions:
        return AcceptDistributions(_target(inputs), inputs.draft_probs)
