"""Verify level on vLLM's V2 model runner (vllm 0.33.0): one speculative step through V2's `RejectionSampler`, as
`GPUModelRunner.sample` calls it for a DSpark speculator (`rejection_sampler(logits, input_batch,
speculator.draft_logits)`), which runs `rejection_sampler_utils.rejection_sample`.

Inputs (objects and substitutes: `runtime`): one request per row with its own `SamplingParams` (greedy rows at
temperature 0; sampled rows at the case's temperature, top-k and top-p, each request seeded), so the randomness is
vLLM's own: V2 draws a request's accept coins and its Gumbel resample noise from hashes of (request seed, token
position[, token id]); nothing is carried between steps except the seed, and the position moves on. A row's verify
length L is what the scheduler scheduled for it: the anchor and L - 1 drafts (vLLM never sees drafts past it, so its
cap_trim is 0 and verify.cap-trim is not declared). A sampled draft's law reaches the kernels as DSpark's draft logits
cache; a one-hot draft (`draft_probs=None`) is a speculator without draft logits (greedy drafting), as vLLM passes
`draft_logits=None`. Target logits go in as float32, the dtype of vLLM's logits.

Outputs: `SamplerOutput.sampled_token_ids` [num_reqs, gamma + 1] and `num_sampled` (accepted drafts + 1). vLLM leaves
the slots past num_sampled unwritten (allocated with `new_empty`), so `finalize` reads the first num_sampled only and
pads with -1 itself (verify.placeholders is not declared). The new sequence length is what the runner's post-update
advances num_computed_tokens by, the scheduled tokens less `num_rejected` from vLLM's `get_num_sampled_and_rejected`.

Two verification methods, one class each: chain (`rejection_sample_method="standard"`, Leviathan et al.: accept
with min(1, p/q) token by token, verify.chain-sampling) and block (`"block"`, Sun et al. 2024: the whole block's law
is the target's, but single positions do not follow the chain rule, so verify.chain-sampling is not declared).
"""

from __future__ import annotations

import torch

from contracts.adapters.vllm_dspark import runtime
from contracts.boundary.verify import AcceptDistributions, AcceptResult, CommitResult, VerifyInputs


def _check_inputs(inputs: VerifyInputs) -> None:
    if not isinstance(inputs, VerifyInputs):
        raise TypeError(f"inputs: expected a VerifyInputs, got {type(inputs).__name__}")
    if inputs.candidates.dim() != 2 or inputs.candidates.shape[1] < 2:
        raise ValueError(f"candidates: expected [bs, gamma+1] with gamma >= 1, got {tuple(inputs.candidates.shape)}")
    if inputs.bs == 0:
        raise ValueError("candidates: vLLM's rejection sampler needs at least one request (bs == 0)")


class VLLMDSparkVerify:
    verification_method = "standard"  # RejectionSampler's rejection_sample_method; the block class sets "block"
    _KEEP = 16  # recent accept results whose vLLM output finalize can read

    def _remember(self, accept, record):
        outputs = self.__dict__.setdefault("_outputs", {})
        outputs[id(accept)] = (accept, record)
        while len(outputs) > self._KEEP:
            outputs.pop(next(iter(outputs)))

    def _settings(self, inputs: VerifyInputs, greedy):
        """Per row (temperature, top_k, top_p): `greedy` True (all rows), False (none) or a [bs] bool mask."""
        sampled = inputs.sampling_settings()
        if greedy is True:
            return [(0.0, 0, 1.0)] * inputs.bs
        if greedy is False:
            return sampled
        return [(0.0, 0, 1.0) if bool(g) else s for g, s in zip(greedy.tolist(), sampled)]

    def _step(self, inputs: VerifyInputs, *, greedy, seed: int = 0, capped: bool = True, session=None):
        """One RejectionSampler call; returns (sampled_token_ids, num_sampled, num_rejected, scheduled drafts).
        `session`: a `runtime.Step` of earlier steps of the same requests (their request state, sampler and seeds
        kept, as the model runner keeps them); None: a new one."""
        _check_inputs(inputs)
        names = runtime.prepare()
        bs, width = inputs.candidates.shape
        gamma, vocab = width - 1, inputs.vocab
        lens = inputs.lens() if capped else torch.full((bs,), width, dtype=torch.int64)
        if bool(((lens < 1) | (lens > width)).any()):
            raise ValueError(f"verify_lens: each must be in [1, gamma+1 = {width}], got {lens.tolist()}")
        prefix = inputs.prefix_lens.to(torch.int64).tolist()
        cand = inputs.candidates.to(torch.int64)
        if session is None:
            settings = self._settings(inputs, greedy)
            step = runtime.Step(names, bs=bs, gamma=gamma, vocab=vocab, method=self.verification_method)
            step.add_requests(cand[:, 0].tolist(), settings, [runtime.request_seed(seed, r) for r in range(bs)],
                              prefix)
            step.settings = settings
        else:
            step, settings = session, session.settings
            if len(step.slots) != bs or step.gamma != gamma or step.vocab != vocab:
                raise ValueError(f"inputs: a later step of the same requests needs bs {len(step.slots)}, gamma "
                                 f"{step.gamma}, V {step.vocab}; got bs {bs}, gamma {gamma}, V {vocab}")
        scheduled = [cand[i, : int(lens[i])].tolist() for i in range(bs)]
        batch = step.input_batch(scheduled, prefix)
        logits = torch.cat([inputs.target_logits[i, : int(lens[i])] for i in range(bs)]).to(torch.float32)
        draft_logits = None
        if inputs.draft_probs is not None:
            draft_logits = step.draft_logits_cache(inputs.draft_probs, [s[0] for s in settings])
        out = step.rejection_sampler(logits.contiguous(), batch, draft_logits)
        n = (lens - 1).to(torch.int64)
        return (out.sampled_token_ids.clone(), out.num_sampled.to(torch.int64).clone(),
                out.num_rejected.to(torch.int64).clone(), n)

    def _accept(self, inputs: VerifyInputs, **kw) -> AcceptResult:
        sampled, num_sampled, num_rejected, n = self._step(inputs, **kw)
        correct = num_sampled - 1
        rows = torch.arange(inputs.bs)
        bonus = sampled.to(torch.int64)[rows, correct.clamp(min=0)]
        accept = AcceptResult(correct, bonus, torch.zeros_like(correct))
        self._remember(accept, (sampled, num_sampled, num_rejected, n))
        return accept

    def greedy_accept(self, inputs: VerifyInputs) -> AcceptResult:
        return self._accept(inputs, greedy=True)

    def sample_block(self, inputs: VerifyInputs, seed: int) -> AcceptResult:
        """Sampled rows with vLLM's own randomness: each request seeded from (seed, row)."""
        return self._accept(inputs, greedy=False, seed=seed)

    def consecutive_blocks(self, steps, seed: int) -> list:
        """verify.mixed-batches: the same requests verified over consecutive steps, one `VerifyInputs` per step (same bs,
        gamma, V; greedy_mask and sampling settings from the first; each step's prefix_lens place it, so positions
        move on), in ONE request state and sampler: V2 carries nothing but each request's seed, and keys its draws
        by (seed, position). Returns one AcceptResult per step."""
        steps = list(steps)
        if not steps:
            raise ValueError("steps: expected at least one VerifyInputs")
        first = steps[0]
        _check_inputs(first)
        names = runtime.prepare()
        session = runtime.Step(names, bs=first.bs, gamma=first.gamma, vocab=first.vocab,
                               method=self.verification_method)
        session.settings = self._settings(first, first.greedy_mask.to(torch.bool))
        session.add_requests(first.candidates[:, 0].tolist(), session.settings,
                             [runtime.request_seed(seed, r) for r in range(first.bs)],
                             first.prefix_lens.to(torch.int64).tolist())
        return [self._accept(inputs, greedy=None, seed=seed, session=session) for inputs in steps]

    def mixed_block(self, inputs: VerifyInputs, seed: int) -> AcceptResult:
        """verify.mixed-batches: greedy rows (greedy_mask) at temperature 0 and sampled rows in one batch, as vLLM
        batches them (VERIFY-013, 014, 016)."""
        return self._accept(inputs, greedy=inputs.greedy_mask.to(torch.bool), seed=seed)

    def finalize(self, inputs: VerifyInputs, accept: AcceptResult) -> CommitResult:
        found = self.__dict__.get("_outputs", {}).get(id(accept))
        if found is None or found[0] is not accept:
            raise ValueError("accept: finalize on vLLM reads the rejection sampler's own output, so it takes only a "
                             "result of this adapter's greedy_accept, sample_block or mixed_block")
        sampled, num_sampled, num_rejected, n = found[1]
        bs, width = inputs.candidates.shape
        commit = num_sampled.clone()
        # The runner's post-update: num_computed_tokens += scheduled tokens (1 + n) - num_rejected.
        new_seq_lens = inputs.prefix_lens.to(torch.int64) + 1 + n - num_rejected
        out = torch.full((bs, width), -1, dtype=torch.int64)
        slot = torch.arange(sampled.shape[1])[None, :]
        written = slot < num_sampled[:, None]  # vLLM's slots past num_sampled are unwritten memory
        out[:, : sampled.shape[1]] = torch.where(written, sampled.to(torch.int64), -1)
        return CommitResult(commit, new_seq_lens, out)

    def accept_distributions(self, inputs: VerifyInputs) -> AcceptDistributions:
        """The laws vLLM's sampled accept reads, recorded at `rejection_sample`'s arguments (all gamma drafts
        scheduled): the target law is the softmax of the processed logits it is handed (the sampler applied
        temperature, top-k and top-p), the draft law the softmax of the draft logits cache over the request's
        temperature, as its kernels compute them."""
        from contracts.patching import patched

        names = runtime.prepare()
        module = names.rejection_sampler
        real = module.rejection_sample
        seen = {}

        def recording(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                      expanded_idx_mapping, expanded_local_pos, temperature, *args, **kwargs):
            seen.update(target=target_logits.clone(), draft=None if draft_logits is None else draft_logits.clone(),
                        idx=expanded_idx_mapping.clone(), local=expanded_local_pos.clone(), temp=temperature.clone())
            return real(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                        expanded_idx_mapping, expanded_local_pos, temperature, *args, **kwargs)

        with patched(module, "rejection_sample", recording):
            self._step(inputs, greedy=False, seed=0, capped=False)
        bs, gamma, vocab = inputs.bs, inputs.gamma, inputs.vocab
        target = seen["target"].to(torch.float32).softmax(-1).reshape(bs, gamma + 1, vocab)
        draft = None
        if seen["draft"] is not None:
            idx, local, temp = seen["idx"].to(torch.int64), seen["local"].to(torch.int64), seen["temp"]
            rows = [i for i in range(idx.shape[0]) if int(local[i]) < gamma]  # every row but each request's bonus
            logits = torch.stack([seen["draft"][idx[i], local[i]] / temp[idx[i]] for i in rows])
            draft = logits.softmax(-1).reshape(bs, gamma, vocab)
        return AcceptDistributions(target, draft)
