"""DSpark's Markov block sampling on DeepSpec (draft.markov-block, DRAFT-004): one request at a time through the
evaluator's `build_dspark_proposal` (as `_propose` calls it), on DeepSpec's own `Qwen3DSparkModel` drafter
(models.py) carrying DeepSpec's own `VanillaMarkov` head; each draft drawn by the head's `sample_block_tokens`
(`sample_tokens`: torch.multinomial at the request's temperature, argmax at 0). The logits returned are the ones
the model's `sample_draft_tokens` hands `build_dspark_proposal`, which turns them into the proposal's `draft_probs`
(`logits_to_probs`: softmax at the temperature), read where the call returns.

Substituted, each with what it can hide:

* `compute_logits` on the drafter instance returns the block's hidden rows as the base logits, and the block hidden
  is the caller's base logits (hides: the drafter's backbone, norm and LM head);
* the Markov head is DeepSpec's `VanillaMarkov` of rank V with the identity embedding and the caller's bias table
  (hides: the gated and RNN heads' arithmetic, a low-rank bias);
* no confidence head, so every proposal keeps the whole block (the truncation is DIST-002's, at the step level);
* the global torch generator is seeded per request from (seed, anchor position) before its call, as the evaluator
  seeds a generation once.
"""

from __future__ import annotations

import torch

from contracts.adapters.deepspec import env as deepspec_env
from contracts.adapters.deepspec.models import ModelSpec, build_models
from contracts.boundary.draft import markov_shapes


class DeepSpecMarkovDraft:
    def markov_draft(self, base_logits, bias, anchors, temperatures, seeds, positions):
        bs, n, vocab = markov_shapes(base_logits, bias)
        deepspec_env.import_deepspec()
        from deepspec.eval.dspark.draft_ops import build_dspark_proposal
        from deepspec.modeling.dspark.markov_head import VanillaMarkov

        _, drafter = build_models(ModelSpec(vocab_size=vocab, block_size=n, confidence_head=False))
        head = VanillaMarkov(vocab_size=vocab, markov_rank=vocab)
        with torch.no_grad():
            head.markov_w1.weight.copy_(torch.eye(vocab))
            head.markov_w2.weight.copy_(bias.to(torch.float32).T)  # bias[prev] = w2 @ onehot(prev)
        drafter.markov_head = head
        drafter.compute_logits = lambda hidden: hidden
        real_sample, seen = drafter.sample_draft_tokens, {}

        def recording(*args, **kwargs):  # DeepSpec's own call; its logits are what the proposal's law is made from
            seen["out"] = real_sample(*args, **kwargs)
            return seen["out"]

        drafter.sample_draft_tokens = recording
        drafts = torch.zeros(bs, n, dtype=torch.int64)
        logits = torch.zeros(bs, n, vocab, dtype=torch.float32)
        with torch.no_grad():
            for r in range(bs):
                torch.manual_seed(int(seeds[r]) * 100_003 + int(positions[r]))
                draft_input_ids = torch.full((1, n), vocab - 1, dtype=torch.int64)  # anchor, then mask ids
                draft_input_ids[0, 0] = int(anchors[r])
                proposal = build_dspark_proposal(drafter, draft_input_ids=draft_input_ids,
                                                 block_hidden=base_logits[r:r + 1].to(torch.float32), block_size=n,
                                                 temperature=float(temperatures[r]), confidence_threshold=0.0)
                drafts[r] = proposal.verify_input_ids[0, 1:]
                logits[r] = seen["out"][1][0]
        return drafts, logits
