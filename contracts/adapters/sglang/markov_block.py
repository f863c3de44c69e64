"""DSpark's Markov block sampling on SGLang (draft.markov-block, DRAFT-004): the draft CUDA graph's tail,
`DsparkDraftSampler`, built by SGLang's own `maybe_build_draft_sampler` (the worker's constructor path), its
sampling parameters staged by `stage_sampling_params` and called as the graph replay calls it, with the drafter's
hidden rows as input; on CPU it runs eagerly (the runner's warm-up call), through `draft_markov_block` and
`MarkovSampleStep`. The logits returned are its `step_logits`, what `accept_draft_tokens` turns into the draft law
(`_draft_probs`: softmax of them at the request's temperature).

Substituted, each with what it can hide:

* the draft model: a namespace with SGLang's own `VanillaMarkov` head (rank V, `markov_w1` the identity, `markov_w2`
  the caller's bias table) and a `compute_base_logits` that returns the hidden rows as the base logits (hides: the
  LM head, a reduced or sharded vocabulary, the gated and RNN heads, the confidence head);
* the batch's sampling info: the two fields the sampler reads (`temperatures`, `top_ks`), each row's from SGLang's
  own `SamplingParams` normalisation (temperature 0 -> top-k 1 at temperature 1); hides `SamplingBatchInfo`'s
  own assembly (the step level builds it);
* `torch.cuda.is_current_stream_capturing` answers False (nothing is captured on CPU); hides capture itself;
* the draft noise: SGLang keys it by the server's random seed (here `seeds[0]`) and a block counter, not by request
  or position, so the per-row seeds and positions are not used.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from contracts.adapters.sglang.runtime import CPU, runtime, single_rank_tp_sync
from contracts.boundary.draft import markov_shapes
from contracts.patching import patched


class SGLangMarkovDraft:
    def markov_draft(self, base_logits, bias, anchors, temperatures, seeds, positions):
        bs, n, vocab = markov_shapes(base_logits, bias)
        runtime()  # SGLang's import environment
        from sglang.srt.models.dspark import VanillaMarkov
        from sglang.srt.sampling.sampling_params import SamplingParams
        from sglang.srt.speculative.dspark_components.dspark_draft import DraftNoise, draft_noise_key
        from sglang.srt.speculative.dspark_components.dspark_draft_sampler import maybe_build_draft_sampler

        head = VanillaMarkov(vocab_size=vocab, markov_rank=vocab)
        with torch.no_grad():
            head.markov_w1.weight.copy_(torch.eye(vocab))
            head.markov_w2.weight.copy_(bias.to(torch.float32).T)  # bias[prev] = w2 @ onehot(prev)
        model = SimpleNamespace(markov_head=head, sample_from_anchor=True, confidence_head=None,
                                compute_base_logits=lambda hidden: (hidden, hidden),
                                lm_head=SimpleNamespace(org_vocab_size=vocab))
        noise = DraftNoise(key=draft_noise_key(int(seeds[0])), offset=torch.zeros((), dtype=torch.int64))
        sampler = maybe_build_draft_sampler(draft_model=model, gamma=n, max_bs=bs, device=CPU, tp_rank=0, noise=noise,
                                            greedy_draft=False, tp_sync=single_rank_tp_sync())
        params = [SamplingParams(temperature=float(t)) for t in temperatures.tolist()]
        info = SimpleNamespace(temperatures=torch.tensor([p.temperature for p in params]).view(-1, 1),
                               top_ks=torch.tensor([p.top_k for p in params], dtype=torch.int32))
        sampler.stage_sampling_params(bs=bs, sampling_info=info)
        input_ids = torch.zeros(bs, n, dtype=torch.int64)
        input_ids[:, 0] = anchors  # each request's query rows start at its anchor (sample_from_anchor)
        with patched(torch.cuda, "is_current_stream_capturing", lambda: False):
            sampler(base_logits.to(torch.float32).reshape(bs * n, vocab), input_ids.reshape(-1))
        return sampler.out[: bs * n].view(bs, n).clone(), sampler.step_logits[:bs].clone()
