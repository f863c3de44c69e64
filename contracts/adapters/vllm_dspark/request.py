"""Whole-request verify on vLLM's V2 model runner (vllm 0.33.0): `request.verify` (REQ-005), one greedy batch of
whole requests through the entry point `GPUModelRunner.sample` takes for a DSpark step.

How V2 applies a request's parameters to a speculative step (file:line in vllm 0.33.0, `vllm/v1/worker/gpu/`):
`RejectionSampler.__call__` (spec_decode/rejection_sampler.py:416-470) gathers each logits row's input token and
position (`gather_draft_sampled`: the anchor, then the drafts), and `_verify` (:250-296) hands the target logits to
the sampler's `apply_sampling_params` (sample/sampler.py:226-276) before `rejection_sample`. That runs, per logits
row, in pipeline order (sampler.py:69-76): `LogitBiasState` (sample/logit_bias.py:158-300: allowed token ids, the
logit bias, then min_tokens: the EOS and stop ids at -inf while `pos + 1 < prompt_len + min_tokens`, the row's own
position), `PenaltiesState` (sample/penalties.py:107-184: repetition scales every token of the prompt or the output,
then frequency and presence subtract; the output counts are the committed output, `output_bin_counts`, kept by the
runner's `post_update`, input_batch.py:566-633, plus the drafts before the row, read from the row's own input ids,
penalties.py:150-160), `BadWordsState` (sample/bad_words.py:101-166: committed output, then the drafts before the
row), custom processors, then temperature, min_p and top-k/top-p. So every parameter reaches every verified column
with the history "committed output + the drafts before it", never a later draft. A step with no draft at all takes
`Sampler.__call__` instead (model_runner.py:1681-1683), the same `apply_sampling_params`.

What vLLM refuses: `SamplingParams.verify` -> `_validate_spec_decode` (sampling_params.py:1185-1197, called at
admission, v1/engine/input_processor.py:157) refuses min_p > 0 and any logit_bias once speculative decoding is on
("not yet supported with speculative decoding"; the V1 logits-processor builder logs the same warning,
v1/sample/logits_processor/__init__.py:207-213). V2 would apply both (above), but no request reaches it with them,
so request.min-p and request.logit-bias are not declared (a greedy request's min_p is reset to 0 by SamplingParams
itself, sampling_params.py:615-619, so it never reaches the refusal). Were the refusal lifted, V2's order would
matter: the bias is added before the penalties scale and subtract (sampler.py:69-76), a reading
`RequestSemantics` cannot state today (its oracle adds the bias last).

Real: `SamplingParams` (its constructor's `_verify_args`, then `update_from_generation_config` with the row's EOS id
as the input processor calls it, input_processor.py:489-492, then `verify` with a speculative config), `RequestState`
(its `add_request`: the slot, the prompt), the committed output through the runner's own `post_update` kernel (one
call per block: the prefill's sampled token, then blocks of up to gamma + 1 accepted tokens; it writes the history
`all_token_ids`, `total_len` and the penalties' `output_bin_counts`), `Sampler` (its `add_request` and staged writes:
`SamplingStates`, `LogitBiasState`, `PenaltiesState` with its `bincount` of the prompt, `BadWordsState`), the
`RejectionSampler` and everything it runs (`runtime`), greedy rows, no draft logits (greedy drafting: the DSpark
speculator keeps no draft logits unless `draft_sample_method="probabilistic"`, spec_decode/speculator.py:179-190).

Substituted (what each can hide), beside `runtime`'s InputBatch, SpeculativeConfig and VllmConfig:
* the ModelConfig `SamplingParams.verify` reads: a namespace with the case's vocabulary, max_logprobs 20, not a
  diffusion model. Hides: a model config that changes those validations.
* `num_computed_tokens` is set at admission to the count the steps leave before this one (everything but the
  anchor); `post_update` is called without `query_start_loc`, so it does not move it. Neither sampler reads it.
  Hides: a bug in the runner's count of computed tokens.
* the eos id travels as `update_from_generation_config`'s argument (the renderer's EOS id in the engine), with no
  generation config. Hides: a generation config's extra EOS ids.

Raggedness: each row schedules its anchor and its own drafts (0 .. gamma), as the existing verify level schedules a
row's verify length: the scheduler cuts a request's drafts at its token budget or length limit, and a request with no
draft shares the batch. A batch with no draft at all goes through `Sampler`, as the runner sends it.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from contracts.adapters.vllm_dspark import runtime
from contracts.boundary.verify import RequestVerifyCase

MAX_LOGPROBS = 20  # vLLM's ModelConfig default


def admitted_params(names, req, vocab: int, spec):
    """A greedy request's `SamplingParams`, through vLLM's own validation (a request it refuses raises)."""
    fields = dict(temperature=0.0, max_tokens=int(req.max_new_tokens), min_tokens=int(req.min_new_tokens),
                  frequency_penalty=float(req.frequency_penalty), presence_penalty=float(req.presence_penalty),
                  repetition_penalty=float(req.repetition_penalty), ignore_eos=bool(req.ignore_eos),
                  stop_token_ids=[int(t) for t in req.stop_token_ids] or None)
    if req.logit_bias:
        fields["logit_bias"] = {int(t): float(b) for t, b in req.logit_bias}
    if req.min_p:
        fields["min_p"] = float(req.min_p)
    params = names.SamplingParams(**fields)
    params.update_from_generation_config({}, None if req.eos_id is None else int(req.eos_id))
    model = SimpleNamespace(max_logprobs=MAX_LOGPROBS, get_vocab_size=lambda: vocab, is_diffusion=False)
    params.verify(model, spec, None, None)
    return params


def _commit_outputs(step, outputs, slots) -> None:
    """The committed outputs, as the runner's `post_update` commits sampled tokens after each step: the prefill's
    one token, then blocks of up to gamma + 1 (an accepted block and its bonus)."""
    post_update = step.names.input_batch.post_update
    width = step.gamma + 1
    done = [0] * len(outputs)
    first = True
    while any(d < len(o) for d, o in zip(done, outputs)):
        rows = [i for i, o in enumerate(outputs) if done[i] < len(o)]
        sampled = torch.zeros(len(rows), width, dtype=torch.int64)
        counts = []
        for k, i in enumerate(rows):
            n = 1 if first else min(width, len(outputs[i]) - done[i])
            sampled[k, :n] = torch.tensor(outputs[i][done[i]: done[i] + n])
            counts.append(n)
            done[i] += n
        first = False
        rs = step.req_states
        post_update(torch.tensor([slots[i] for i in rows], dtype=torch.int32), rs.num_computed_tokens.gpu,
                    rs.last_sampled_tokens, step.sampler.penalties_state.output_bin_counts, sampled,
                    torch.tensor(counts, dtype=torch.int32), torch.zeros(len(rows), dtype=torch.int32), None,
                    rs.all_token_ids.gpu, rs.total_len.gpu)


class VLLMDSparkRequestVerify:
    def verify_requests(self, case: RequestVerifyCase) -> list:
        """Each row a greedy request: admitted through SamplingParams, added to the request state and sampler,
        its output committed by `post_update`, then one batch (anchor + drafts per row, raw float32 target logits)
        through the runner's sample dispatch. Returns each row's sampled tokens (the first num_sampled)."""
        if not isinstance(case, RequestVerifyCase):
            raise TypeError(f"case: expected a RequestVerifyCase, got {type(case).__name__}")
        if not case.rows:
            raise ValueError("case: vLLM never samples a batch with no request")
        names = runtime.prepare()
        bs, gamma, vocab = len(case.rows), case.gamma, case.vocab
        step = runtime.Step(names, bs=bs, gamma=gamma, vocab=vocab, method=self.verification_method)
        params = [admitted_params(names, row.request, vocab, step.spec) for row in case.rows]
        for i, (row, p) in enumerate(zip(case.rows, params)):
            if not row.output or len(row.drafts) > gamma or len(row.logits) != len(row.drafts) + 1:
                raise ValueError(f"row {i}: expected an output, at most gamma = {gamma} drafts and one logits row "
                                 f"more than drafts")
            prompt = [int(t) for t in row.request.prompt]
            step.req_states.add_request(f"req-{i}", prompt_len=len(prompt), all_token_ids=prompt,
                                        num_computed_tokens=len(prompt) + len(row.output) - 1,
                                        max_tokens=int(row.request.max_new_tokens))
            step.slots.append(step.req_states.req_id_to_index[f"req-{i}"])
            step.sampler.add_request(step.slots[-1], p)
        step.req_states.apply_staged_writes()  # the runner's order: the penalties' bincount reads the request state
        step.sampler.apply_staged_writes()
        _commit_outputs(step, [[int(t) for t in row.output] for row in case.rows], step.slots)
        scheduled = [[int(row.output[-1]), *map(int, row.drafts)] for row in case.rows]
        # The anchor sits at position prompt + output - 1; `input_batch` places it at 1 + its second argument.
        before = [len(row.request.prompt) + len(row.output) - 2 for row in case.rows]
        batch = step.input_batch(scheduled, before)
        logits = torch.tensor([x for row in case.rows for x in row.logits], dtype=torch.float32)
        if batch.num_draft_tokens == 0:  # GPUModelRunner.sample: no draft in the batch, the plain sampler
            out = step.sampler(logits, batch)
        else:
            out = step.rejection_sampler(logits.contiguous(), batch, None)
        sampled, num = out.sampled_token_ids.to(torch.int64), out.num_sampled.to(torch.int64)
        return [sampled[i, : int(num[i])].tolist() for i in range(bs)]
