"""Verify level on DeepSpec: one verify step through `deepspec.eval.base_evaluator.verify_draft_tokens`, as
`generate_decoding_sample` calls it.

Inputs: one call per row (DeepSpec's verify is batch size 1). A row's verify length L is a proposal of L-1 drafts
(`DraftProposal.draft_token_count = L - 1`: what the confidence head's truncation hands the verify), so DeepSpec
never sees the drafts past it and reports cap_trim 0 (verify.cap-trim is not declared). The anchor is the proposal's
first verify id. The draft law is the proposal's `draft_probs` (a one-hot draft: the point mass on the candidate,
which is what DeepSpec's drafter hands over at temperature 0). Greedy rows run at temperature 0, DeepSpec's greedy.

Substitute: the target model is a fixed-logits stand-in that returns the case's target logits (as float32, the
evaluator's logits dtype on CPU) for the proposal's verify ids, after checking that it was fed exactly the anchor
and the L-1 drafts at positions prefix .. prefix+L-1. It hides: a bug in the real target forward or its KV cache
(the step level runs a real target for that). Randomness is DeepSpec's own: the global torch generator it draws its
coins (`rand_like`) and its residual or bonus (`multinomial`) from, seeded per call and restored afterwards.

DeepSpec samples softmax(logits / T) only: it has no top-k or top-p. A row with a top-k/top-p setting is verified
at its temperature alone; VERIFY-011, which checks the cut, is hardening for this pack (DeepSpec's evaluator never
sets one). finalize reads DeepSpec's own `committed_tokens` (accepted drafts, then the residual or bonus token) and
pads them with -1; the new sequence length is the loop's `start += accepted + 1`, done by the adapter.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from contracts.boundary.verify import AcceptDistributions, AcceptResult, CommitResult, VerifyInputs
from contracts.patching import patched


class _FixedLogitsTarget:
    """The verify boundary's target: the case's logits for the ids DeepSpec feeds, nothing else."""

    def __init__(self, verify_ids: torch.Tensor, positions: torch.Tensor, logits: torch.Tensor):
        self._ids, self._positions, self._logits = verify_ids, positions, logits

    def __call__(self, *, input_ids, position_ids, past_key_values, use_cache, output_hidden_states, **_):
        if not torch.equal(input_ids, self._ids):
            raise AssertionError(f"verify_draft_tokens fed the target {input_ids.tolist()}, not the proposal's "
                                 f"anchor and drafts {self._ids.tolist()}")
        if not torch.equal(position_ids, self._positions):
            raise AssertionError(f"verify_draft_tokens fed positions {position_ids.tolist()}, expected "
                                 f"{self._positions.tolist()}")
        return SimpleNamespace(logits=self._logits, hidden_states=None)


def _check(inputs: VerifyInputs) -> None:
    if not isinstance(inputs, VerifyInputs):
        raise TypeError(f"inputs: a VerifyInputs, got {type(inputs).__name__}")
    if inputs.candidates.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"candidates: integer token ids, got {inputs.candidates.dtype}")


class DeepSpecVerify:
    _KEEP = 16  # recent accept results whose DeepSpec output finalize can read

    def _remember(self, accept, results):
        outputs = self.__dict__.setdefault("_outputs", {})
        outputs[id(accept)] = (accept, results)
        while len(outputs) > self._KEEP:
            outputs.pop(next(iter(outputs)))

    def _rows(self, inputs: VerifyInputs, *, greedy: bool, capped: bool = True):
        """Yield one verify_draft_tokens call per row: (VerificationResult, the draft law handed over). The batch's
        conversions are done once (per-row calls dominate the Monte-Carlo contracts' time)."""
        from deepspec.eval.base_evaluator import DraftProposal, verify_draft_tokens
        from transformers import DynamicCache

        gamma, vocab = inputs.gamma, inputs.vocab
        lens = inputs.lens().tolist() if capped else [gamma + 1] * inputs.bs
        temps = [0.0] * inputs.bs if greedy else [t for t, _, _ in inputs.sampling_settings()]
        prefixes = inputs.prefix_lens.tolist()
        candidates = inputs.candidates.to(torch.int64)
        logits = inputs.target_logits.to(torch.float32)  # the evaluator's logits dtype on CPU
        if greedy or inputs.draft_probs is None:  # DeepSpec's q of a deterministic draft: a point mass on it
            # clamped only so that one_hot builds: an id outside [0, V) still reaches DeepSpec, which gathers at it
            q_all = torch.nn.functional.one_hot(candidates[:, 1:].clamp(0, vocab - 1), vocab).to(torch.float32)
        else:
            q_all = inputs.draft_probs.to(torch.float32)
        positions = torch.arange(max(prefixes, default=0) + gamma + 2)[None, :]  # the loop's position_ids
        cache = DynamicCache()  # the fixed-logits target never reads it
        for row in range(inputs.bs):
            length, prefix = int(lens[row]), int(prefixes[row])
            n = length - 1
            ids = candidates[row: row + 1, :length]
            q = q_all[row: row + 1, :n]
            target = _FixedLogitsTarget(ids, positions[:, prefix: prefix + length], logits[row: row + 1, :length])
            proposal = DraftProposal(draft_token_count=n, verify_input_ids=ids, draft_probs=q if n > 0 else None)
            yield verify_draft_tokens(target_model=target, proposal=proposal, position_ids=positions, start=prefix,
                                      past_key_values_target=cache, temperature=float(temps[row]),
                                      max_proposal_tokens=gamma, current_token_ids=ids[:, :1], stop_token_ids=None), q

    def _accept(self, inputs: VerifyInputs, *, greedy: bool, seed: int = 0) -> AcceptResult:
        _check(inputs)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            results = [r for r, _ in self._rows(inputs, greedy=greedy)]
        correct = torch.tensor([r.accepted_draft_tokens for r in results], dtype=torch.int64)
        bonus = torch.tensor([int(r.next_token[0]) for r in results], dtype=torch.int64)
        accept = AcceptResult(correct, bonus, torch.zeros_like(correct))
        self._remember(accept, results)
        return accept

    def greedy_accept(self, inputs: VerifyInputs) -> AcceptResult:
        return self._accept(inputs, greedy=True)

    def sample_block(self, inputs: VerifyInputs, seed: int) -> AcceptResult:
        """Sampled rows with DeepSpec's own randomness: the global generator, seeded with `seed` for the call."""
        if not isinstance(seed, int):
            raise TypeError(f"seed: an int, got {type(seed).__name__}")
        return self._accept(inputs, greedy=False, seed=seed)

    def finalize(self, inputs: VerifyInputs, accept: AcceptResult) -> CommitResult:
        found = self.__dict__.get("_outputs", {}).get(id(accept))
        if found is None or found[0] is not accept:
            raise ValueError("accept: finalize on DeepSpec reads verify_draft_tokens' own committed tokens, so it takes "
                             "only a result of this adapter's greedy_accept or sample_block")
        results = found[1]
        bs, width = inputs.candidates.shape
        out = torch.full((bs, width), -1, dtype=torch.int64)
        commit = torch.zeros(bs, dtype=torch.int64)
        for row, r in enumerate(results):
            committed = r.committed_tokens[0].to(torch.int64)
            out[row, : committed.numel()] = committed
            commit[row] = committed.numel()
        return CommitResult(commit, inputs.prefix_lens.to(torch.int64) + commit, out)

    def accept_distributions(self, inputs: VerifyInputs) -> AcceptDistributions:
        """The laws verify_draft_tokens reads, all gamma drafts proposed: the target probabilities it builds from the
        logits (`logits_to_probs`, returned as `target_probs`) and the draft probabilities its accept test gathers
        the drafts from (recorded at `gather_token_probs`)."""
        _check(inputs)
        from deepspec.eval import base_evaluator as be

        target_rows, draft_rows = [], []
        seen = []
        real_gather = be.gather_token_probs

        def recording_gather(probs, token_ids):
            seen.append(probs.detach().clone())
            return real_gather(probs, token_ids)

        with torch.random.fork_rng(devices=[]), patched(be, "gather_token_probs", recording_gather):
            torch.manual_seed(0)
            for result, _ in self._rows(inputs, greedy=False, capped=False):
                target_rows.append(result.target_probs[0].detach().clone())
                draft_rows.append(seen[-1][0])  # the row's second gather: the draft law the accept divides by
        target = torch.stack(target_rows) if target_rows else inputs.target_probs.to(torch.float32)
        draft = torch.stack(draft_rows) if draft_rows else None
        return AcceptDistributions(target, draft)
