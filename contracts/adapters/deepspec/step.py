"""Step level on DeepSpec: whole generations through `deepspec.eval.base_evaluator.generate_decoding_sample`, with
DeepSpec's own DSpark evaluator callbacks (`Qwen3DSparkEvaluator._init_context`, `_propose`, `_update`), as
`Qwen3DSparkEvaluator.generate_one_sample` passes them.

DeepSpec's decode loop serves one request at a time (batch size 1) and runs it to the end in one call. So a request
is generated when it is added, with its own seed (`torch.manual_seed` keyed by the engine seed and the request id,
on a forked generator), and each loop iteration (propose, verify, commit) is one step: `step()` replays the next
iteration of every live request. The iterations are recorded by thin wrappers around the evaluator's callbacks and
the target model, reading DeepSpec's own state, never recomputing it:
  - at each `propose`: the loop's `start` (the committed length; `output_ids[start]` is the pending anchor), the
    drafter's context length (its KV cache plus the target features not yet in it), and `output_ids` so far;
  - at each target call: the target KV cache length before the call and the ids fed, so the ids whose keys and
    values the cache holds at each verify are the ones it kept (its length) of what it was fed;
  - at `post_verify` (the evaluator's diagnostic hook): the proposal length (a step's verify length is it + 1);
  - after each `_update`: the target features it left for the drafter (`context.target_hidden_states`):
    step.draft-context;
  - at each `propose`: the block the drafter's `sample_draft_tokens` drew, and the proposal `build_dspark_proposal`
    returned (its drafts and its `draft_probs`, the law `verify_draft_tokens` scores them with): step.draft-draws.
A step's accepted drafts and added tokens are DeepSpec's reported statistics (`accepted_draft_lengths`,
`acceptance_lengths`); its emitted tokens are that slice of DeepSpec's returned (trimmed) `output_ids`.
A request is live while DeepSpec's loop will run another iteration for it.

Mapping of EngineSpec (the machine's knobs; DeepSpec has no scheduler): vocab_size and gamma (the drafter's block)
build the models (contracts.adapters.deepspec.models); `drafter` picks DeepSpec's Markov head: vanilla, gated, rnn;
random = no Markov head (the backbone's parallel logits), oracle = no Markov head either (DeepSpec has no drafter
that reads the target: LOOP-007 and DRAFT-003 are not declared). The confidence head is built with every Markov
head and runs at the adapter's `confidence_threshold`, 0 by default (the evaluator's default: it never truncates;
with a threshold on, a static step verifies the confidence-truncated proposal and the adapter declares
step.self-truncating, so LOOP-003 holds it to 1 <= L <= gamma+1, not to "verify all"; tests/deepspec run that
adapter). `EngineSpec.options` may set one engine's threshold (`confidence_threshold`, options.py): in `check`,
DIST-002 runs its vanilla configuration at 0.5 too and OPT-001 compares greedy outputs at 0.5 and 0; neither holds a
static step to "verify all", the machine's check that step.self-truncating relaxes. verify_mode must be static.
enable_overlap, sample_from_anchor (DeepSpec always samples the first draft from the anchor row), capture_bs,
pool_size, max_context_len have no DeepSpec counterpart and change nothing. A request's temperature is DeepSpec's
only sampling knob: top_k 1 is greedy (temperature 0); another top-k or top-p is not applied (DeepSpec has none;
the machine families never check a sampled row's law, and DIST-001's top-k/top-p configurations run only under
step.ragged, which this pack does not declare). Not declared: step.pd-handoff (no PD), step.ragged (no budget
planner), step.overlap-toggle (no overlap scheduler), step.laws (drafts are multinomial draws, not Gumbel-max with
observable noise).

Whole-request parameters (params.py): a request's EOS id and stop token ids become DeepSpec's one stop list,
`generate_decoding_sample(stop_token_ids=...)`, where the evaluator puts every EOS id of the model (None where empty,
DeepSpec's own "no stop" path). DeepSpec has no ignore_eos: a request that sets it gets the list without its EOS id,
as a caller of generate_decoding_sample would (the adapter's mapping: it can hide nothing of DeepSpec's, which never
sees the flag). The families DeepSpec has no counterpart for (penalties, min_new_tokens, min_p, logit_bias) are
refused with a ValueError, never dropped. The pack declares no request.* capability (why: the adapter's docstring);
tests/deepspec/test_request.py runs REQ-001 with request.stop-tokens on this mapping.

Substitutes: the weights-free models (models.py); `target_next_logits` reads a float64 copy of the same target, so
the laws DIST-001 compares against are the target's own in float64 while DeepSpec decodes in float32.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Optional

import torch

from contracts.adapters.deepspec.models import HIDDEN, ModelSpec, build_models
from contracts.adapters.deepspec.options import threshold_of
from contracts.boundary.engine import DraftContextUpdate, DraftDraws, EngineSpec, RequestSpec, RequestView, StepView

_DRAFTERS = {"vanilla": "vanilla", "gated": "gated", "rnn": "rnn", "random": "none", "oracle": "none"}


@dataclass
class _Iteration:
    start: int  # committed length the iteration starts from (output_ids[start] is the anchor)
    anchor: int
    draft_ctx_len: int
    target_cache: Optional[list] = None  # the ids whose keys and values the target cache held at this verify
    proposal_len: Optional[int] = None
    block: tuple = ()  # the drafter's sampled block (sample_draft_tokens), before the confidence truncation
    verified: tuple = ()  # the proposal's drafts (verify_input_ids after the anchor)
    draft_probs: Optional[torch.Tensor] = None  # [proposal_len, V] the proposal's draft_probs, which the verify reads
    ctx_features: Optional[torch.Tensor] = None  # the target features `_update` left for the drafter (None: not run)


@dataclass
class _Request:
    spec: RequestSpec
    output: list  # DeepSpec's returned output tokens (prompt excluded)
    iterations: list
    acceptance_lengths: list  # DeepSpec's reported statistics, one per round: tokens the round added
    accepted_draft_lengths: list  # and drafts it accepted
    done_steps: int = 0
    aborted: bool = False
    emitted: int = 1  # the prefill's token

    @property
    def live(self) -> bool:
        return not self.aborted and self.done_steps < len(self.iterations)


@dataclass
class _Handle:
    spec: EngineSpec
    target: object
    drafter: object
    target64: object
    threshold: float = 0.0  # the evaluator's confidence_threshold for this engine's proposals
    requests: dict = field(default_factory=dict)
    logits_memo: dict = field(default_factory=dict)
    last_step: list = field(default_factory=list)  # (request, iteration) replayed by the last step


class _RecordingTarget:
    """The real target; records the KV cache length each call starts from and the ids it is fed."""

    def __init__(self, model, record):
        self._model, self._record = model, record

    def __call__(self, **kwargs):
        self._record(kwargs["past_key_values"].get_seq_length(), kwargs["input_ids"][0].tolist())
        return self._model(**kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)


class _RecordingDrafter:
    """The real drafter; records the block its `sample_draft_tokens` draws (build_dspark_proposal keeps a prefix)."""

    def __init__(self, model, record):
        self._model, self._record = model, record

    def sample_draft_tokens(self, *args, **kwargs):
        tokens, logits = self._model.sample_draft_tokens(*args, **kwargs)
        self._record(tuple(tokens[0].tolist()))
        return tokens, logits

    def __getattr__(self, name):
        return getattr(self._model, name)


_NOT_ACCEPTED = ("frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "min_p", "logit_bias")
_PLAIN = RequestSpec(0, (0,))  # every whole-request parameter off


def _stop_token_ids(r: RequestSpec) -> Optional[list]:
    """DeepSpec's one stop list (`generate_decoding_sample(stop_token_ids=...)`): the EOS id, then the stop token ids.
    DeepSpec has no ignore_eos; such a request's list leaves the EOS out, as a caller of generate_decoding_sample
    would. None where the list is empty: DeepSpec's own "no stop token" path."""
    ids = [] if r.eos_id is None or r.ignore_eos else [int(r.eos_id)]
    ids += [int(t) for t in r.stop_token_ids if int(t) not in ids]
    return ids or None


def _request_seed(engine_seed: int, rid: int) -> int:
    return (int(engine_seed) * 1_000_003 + int(rid) * 7919 + 17) & 0x7FFFFFFF


class DeepSpecStep:
    # The evaluator's --confidence_threshold: 0 (its default) never truncates a proposal; the adapter's constructor
    # sets another (tests/deepspec run DIST-001 and the loop contracts with it on); EngineSpec.options sets one engine's
    # (the `confidence_threshold` option, options.py: DIST-002 and OPT-001 in `check`).
    confidence_threshold = 0.0

    def _models(self, spec: EngineSpec):
        cache = self.__dict__.setdefault("_model_cache", {})
        key = (spec.vocab_size, spec.gamma, _DRAFTERS[spec.drafter], spec.model_seed)
        if key not in cache:
            mspec = ModelSpec(spec.vocab_size, spec.gamma, _DRAFTERS[spec.drafter], confidence_head=True,
                              model_seed=spec.model_seed)
            target, drafter = build_models(mspec)
            # The float64 copy's logits per prefix are shared by every handle on these models (DIST-001's configs).
            cache[key] = (target, drafter, copy.deepcopy(target).to(torch.float64), {})
            while len(cache) > 8:
                cache.pop(next(iter(cache)))
        return cache[key]

    def new_engine(self, spec: EngineSpec) -> _Handle:
        if not isinstance(spec, EngineSpec):
            raise TypeError(f"spec: an EngineSpec, got {type(spec).__name__}")
        if spec.verify_mode != "static":
            raise ValueError(f"verify_mode: DeepSpec verifies every proposed draft (no budget planner), so only "
                             f"'static'; got {spec.verify_mode!r}")
        if spec.drafter not in _DRAFTERS:
            raise ValueError(f"drafter: one of {sorted(_DRAFTERS)}, got {spec.drafter!r}")
        if not isinstance(spec.vocab_size, int) or spec.vocab_size < 2:
            raise ValueError(f"vocab_size: at least 2, got {spec.vocab_size!r}")
        if not isinstance(spec.gamma, int) or spec.gamma < 1:
            raise ValueError(f"gamma: the drafter's block, at least 1, got {spec.gamma!r}")
        threshold = threshold_of(spec.options, self.confidence_threshold)
        target, drafter, target64, memo = self._models(spec)
        return _Handle(spec, target, drafter, target64, threshold, logits_memo=memo)

    def _check_request(self, handle: _Handle, r: RequestSpec) -> None:
        if not isinstance(r, RequestSpec):
            raise TypeError(f"requests: RequestSpec items, got {type(r).__name__}")
        v = handle.spec.vocab_size
        if r.rid in handle.requests:
            raise ValueError(f"rid: request {r.rid} was already added")
        if not r.prompt or any(not isinstance(t, int) or not 0 <= t < v for t in r.prompt):
            raise ValueError(f"prompt: 1+ token ids in [0, {v}), got {r.prompt!r}")
        if not isinstance(r.max_new_tokens, int) or r.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: at least 1, got {r.max_new_tokens!r}")
        if r.temperature < 0:
            raise ValueError(f"temperature: >= 0, got {r.temperature!r}")
        if r.eos_id is not None and not 0 <= r.eos_id < v:
            raise ValueError(f"eos_id: a token id in [0, {v}) or None, got {r.eos_id!r}")
        if any(not isinstance(t, int) or not 0 <= t < v for t in r.stop_token_ids):
            raise ValueError(f"stop_token_ids: token ids in [0, {v}), got {r.stop_token_ids!r}")
        # DeepSpec has none of these (params.py): refused, never silently dropped.
        for name in _NOT_ACCEPTED:
            if getattr(r, name) != getattr(_PLAIN, name):
                raise ValueError(f"{name}: DeepSpec's generation path takes no {name} (see "
                                 f"contracts/adapters/deepspec/params.py), got {getattr(r, name)!r}")

    def _generate(self, handle: _Handle, r: RequestSpec) -> _Request:
        from deepspec.eval.base_evaluator import generate_decoding_sample
        from deepspec.eval.dspark.evaluator import Qwen3DSparkEvaluator

        temperature = 0.0 if r.greedy else float(r.temperature)
        # The evaluator as its own generate_one_sample runs it: its models, its args, its callbacks (no recorder:
        # the calibration recorder only collects metrics).
        ev = object.__new__(Qwen3DSparkEvaluator)
        blocks: list = []
        ev.target_model, ev.draft_model = handle.target, _RecordingDrafter(handle.drafter, blocks.append)
        ev.args = SimpleNamespace(temperature=temperature, confidence_threshold=handle.threshold,
                                  max_new_tokens=r.max_new_tokens)
        ev.confidence_head_recorder = None
        iterations: list = []

        def propose(*, context, output_ids, position_ids, start, stop_token_ids=None):
            ctx = context.past_key_values_draft.get_seq_length() + context.target_hidden_states.shape[1]
            it = _Iteration(int(start), int(output_ids[0, start]), int(ctx))
            iterations.append(it)
            proposal = ev._propose(context=context, output_ids=output_ids, position_ids=position_ids, start=start,
                                   stop_token_ids=stop_token_ids)
            it.block = blocks[-1] if blocks else ()
            it.verified = tuple(proposal.verify_input_ids[0, 1:].tolist())
            v = handle.spec.vocab_size
            it.draft_probs = torch.zeros(0, v) if proposal.draft_probs is None else proposal.draft_probs[0].detach()
            return proposal

        fed: list = []  # the ids the target cache holds, in position order: what each call kept, then what it fed

        def on_target(cache_len, input_ids):
            if iterations:  # the prefill call has no iteration yet
                iterations[-1].target_cache = fed[:cache_len]
            fed[cache_len:] = input_ids

        def update(context, verification):
            ev._update(context, verification)
            iterations[-1].ctx_features = context.target_hidden_states[0].detach().to(torch.float64).clone()

        def post_verify(proposal, verification):
            iterations[-1].proposal_len = int(proposal.draft_token_count)

        prompt = torch.tensor([list(r.prompt)], dtype=torch.int64)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_request_seed(handle.spec.seed, r.rid))
            out = generate_decoding_sample(
                target_model=_RecordingTarget(handle.target, on_target), input_ids=prompt,
                max_new_tokens=r.max_new_tokens, max_proposal_tokens=ev.max_proposal_tokens, temperature=temperature,
                stop_token_ids=_stop_token_ids(r), init_context=ev._init_context,
                propose=propose, update=update, post_verify=post_verify)
        output = out.output_ids[0, out.num_input_tokens:].tolist()
        return _Request(r, output, iterations, list(out.acceptance_lengths), list(out.accepted_draft_lengths))

    def add_requests(self, handle: _Handle, requests, via: str) -> None:
        if via != "local":
            raise ValueError(f"via: DeepSpec has no PD handoff, only 'local' prefill; got {via!r}")
        requests = list(requests)
        for r in requests:
            self._check_request(handle, r)
        if len({r.rid for r in requests}) != len(requests):
            raise ValueError("rid: duplicate request ids in one call")
        for r in requests:
            handle.requests[r.rid] = self._generate(handle, r)

    def step(self, handle: _Handle) -> StepView:
        view = StepView([], [], [], [], None, [], [], [], [], [], [])
        handle.last_step = []
        for rid, req in handle.requests.items():
            if not req.live:
                continue
            i = req.done_steps
            it = req.iterations[i]
            n_in = len(req.spec.prompt)
            # DeepSpec's reported statistics for the round: the drafts it accepted and the tokens it added (the
            # accepted drafts and the bonus; no bonus after an accepted stop token). The emitted tokens are those
            # positions of DeepSpec's returned output (trimmed at max_new_tokens and the stop token), so a statistic
            # that disagrees with the output shows in the bookkeeping contracts.
            accepted = req.accepted_draft_lengths[i]
            commit = accepted + 1
            upto = it.start + req.acceptance_lengths[i] + 1 - n_in
            emitted = req.output[it.start + 1 - n_in: max(upto, it.start + 1 - n_in)]
            req.done_steps += 1
            req.emitted += len(emitted)
            handle.last_step.append((req, it))
            nxt = req.iterations[i + 1].start if i + 1 < len(req.iterations) else it.start + commit
            view.rids.append(rid)
            view.seq_lens.append(it.start)
            view.verify_lens.append(it.proposal_len + 1)
            view.planned.append(False)
            view.correct_lens.append(accepted)
            view.cap_trim.append(0)
            view.commit_lens.append(commit)
            view.new_seq_lens.append(nxt)
            view.emitted.append(list(emitted))
            if not req.live:
                view.finished.append(rid)
        return view

    def draft_draws(self, handle: _Handle) -> list:
        """The last step's sampled requests: the block each drew, the proposal verified and its draft_probs."""
        return [DraftDraws(req.spec.rid, it.block, it.verified, it.draft_probs)
                for req, it in handle.last_step if not req.spec.greedy]

    def draft_context_updates(self, handle: _Handle) -> list:
        """The target features each round's `_update` handed the drafter (none where the loop ended without one)."""
        width = HIDDEN * len(handle.drafter.target_layer_ids)
        return [DraftContextUpdate(req.spec.rid, it.start, torch.zeros(0, width, dtype=torch.float64)
                                   if it.ctx_features is None else it.ctx_features) for req, it in handle.last_step]

    def target_features(self, handle: _Handle, sequence) -> torch.Tensor:
        """The evaluator's context feature (the target's hidden states after each of the drafter's
        `target_layer_ids`, -1 the embeddings, concatenated) from one float64 forward over the whole sequence."""
        with torch.no_grad():
            hs = handle.target64(input_ids=torch.tensor([[int(t) for t in sequence]]), output_hidden_states=True
                                 ).hidden_states
        return torch.cat([hs[0 if i == -1 else i + 1][0] for i in handle.drafter.target_layer_ids], dim=-1)

    def abort(self, handle: _Handle, rid: int) -> None:
        req = handle.requests.get(rid)
        if req is None:
            raise ValueError(f"rid: no request {rid!r} in this engine")
        if req.live:
            req.aborted = True

    def set_overlap(self, handle: _Handle, on: bool) -> None:
        raise ValueError("on: DeepSpec has no overlap scheduler (step.overlap-toggle is not declared)")

    def overlap_budget_lag(self, handle: _Handle) -> int:
        return 0  # no budget planner: no step ever waits for a resolved budget

    def request_views(self, handle: _Handle) -> list:
        views = []
        for rid, req in handle.requests.items():
            out = req.output[: req.emitted]
            if req.live:
                it = req.iterations[req.done_steps]
                views.append(RequestView(rid, req.spec.prompt, out, True, None, it.start, it.anchor, it.target_cache,
                                         it.draft_ctx_len))
            else:
                reason = "abort" if req.aborted else (
                    "stop" if out and out[-1] in (_stop_token_ids(req.spec) or ()) else "length")
                views.append(RequestView(rid, req.spec.prompt, out, False, reason))
        return views

    def target_next_logits(self, handle: _Handle, sequence) -> torch.Tensor:
        """The target's logits after `sequence`, from a float64 copy of the same weights (memoised per model)."""
        key = tuple(int(t) for t in sequence)
        if not key:
            raise ValueError("sequence: at least one token")
        if key not in handle.logits_memo:
            with torch.no_grad():
                handle.logits_memo[key] = handle.target64(input_ids=torch.tensor([key])).logits[0, -1].clone()
        return handle.logits_memo[key]
