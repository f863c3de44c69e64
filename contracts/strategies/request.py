"""Whole requests: every parameter family an engine's pack exercises, biased to where speculation can differ from
plain decoding.

- penalties large enough to flip the argmax once a token has been emitted, so a column that reads the wrong
  history (drafts not yet committed, or rejected ones) picks another token; small vocabularies repeat tokens
  inside one block;
- min_new_tokens at the block's edges (1, gamma, gamma+1, gamma+2), with the EOS id pulled up by a logit bias so the
  mask decides the token;
- stop token ids that the target likes, so one lands at any draft position;
- min_p that cuts the draft's token often;
- in a batch, only some requests carry a parameter.

Each family is drawn with its off value first, so a failing request shrinks to the parameters it needs.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from hypothesis import strategies as st

from contracts import oracle, request_oracle
from contracts.boundary.engine import LoopCase, RequestSpec
from contracts.boundary.verify import RequestVerifyCase, RequestVerifyRow
from contracts.protocol import (
    REQUEST,
    REQUEST_LOGIT_BIAS,
    REQUEST_MIN_NEW_TOKENS,
    REQUEST_MIN_P,
    REQUEST_PARAMETERS,
    REQUEST_PENALTIES,
    REQUEST_STOP_TOKENS,
    VERIFY_FAMILIES,
)
from contracts.strategies.engine import SAMPLED_SETTINGS, _modes_for, engine_specs

# Off first (the simplest value); the values the engines document as bounds next (SGLang's and vLLM's verify()).
_ADDITIVE = st.sampled_from([0.0, 2.0, 1.0, -2.0, 0.5, -0.5]) | st.floats(-2.0, 2.0)
_SCALING = st.sampled_from([1.0, 2.0, 1.5, 0.5, 1.2]) | st.floats(0.1, 2.0)
_MIN_P = st.sampled_from([0.0, 0.3, 0.1, 0.9, 0.05]) | st.floats(0.0, 1.0)
_BIAS = st.sampled_from([3.0, -3.0, 8.0, -8.0, 1.0]) | st.floats(-10.0, 10.0)
FAMILIES = (REQUEST_PENALTIES, REQUEST_MIN_NEW_TOKENS, REQUEST_MIN_P, REQUEST_LOGIT_BIAS, REQUEST_STOP_TOKENS)


def families_of(engine) -> tuple:
    """The parameter families this engine's pack exercises (all of them where no engine is given)."""
    if engine is None:
        return FAMILIES
    caps = engine.capabilities
    return tuple(f for f in FAMILIES if f in caps) if REQUEST in caps else ()


def refused_of(engine) -> frozenset:
    """The request parameters of its families the engine does not accept (its pack's `accepted_parameters`): never
    drawn, as its admission would refuse them."""
    accepted = getattr(engine, "accepted_parameters", ()) if engine is not None else ()
    return frozenset(p for p in REQUEST_PARAMETERS if accepted and p not in accepted)


@st.composite
def whole_requests(draw, rid: int, vocab_size: int, gamma: int, *, families=FAMILIES, greedy=None,
                   refused=frozenset()) -> RequestSpec:
    """One request: prompt 1..4 tokens, max_new_tokens 1..10, greedy or sampled, and the parameter families given,
    each on or off (a `refused` parameter of a family left at its default)."""
    tok = st.integers(0, vocab_size - 1)
    prompt = tuple(draw(st.lists(tok, min_size=1, max_size=4), label=f"prompt {rid}"))
    max_new = draw(st.sampled_from([10, 7]) | st.integers(1, 10), label=f"max_new {rid}")  # long: several blocks
    if greedy is None:
        greedy = draw(st.sampled_from([True, True, False]), label=f"greedy {rid}")  # greedy is token-exact: more of it
    t, k, p = (0.0, 0, 1.0) if greedy else draw(st.sampled_from(SAMPLED_SETTINGS), label=f"settings {rid}")
    fields: dict = {}
    if REQUEST_PENALTIES in families:
        fields.update(frequency_penalty=draw(_ADDITIVE, label=f"frequency {rid}"),
                      presence_penalty=draw(_ADDITIVE, label=f"presence {rid}"),
                      repetition_penalty=draw(_SCALING, label=f"repetition {rid}"))
        for p in refused & {"frequency_penalty", "presence_penalty", "repetition_penalty"}:
            del fields[p]
    eos = draw(st.none() | tok, label=f"eos {rid}")
    bias: dict = {}
    if REQUEST_MIN_NEW_TOKENS in families:
        edge = st.sampled_from([0, 1, gamma, gamma + 1, gamma + 2]) | st.integers(0, max_new)
        fields["min_new_tokens"] = min(draw(edge, label=f"min_new {rid}"), max_new)
        if fields["min_new_tokens"] and eos is None:  # a mask needs something to mask
            eos = draw(tok, label=f"masked eos {rid}")
        if fields["min_new_tokens"] and REQUEST_LOGIT_BIAS in families:
            bias[eos] = draw(st.sampled_from([4.0, 0.0, 8.0]), label=f"eos pull {rid}")  # the mask decides the token
    if REQUEST_MIN_P in families and not greedy:
        fields["min_p"] = draw(_MIN_P, label=f"min_p {rid}")
    if REQUEST_LOGIT_BIAS in families:
        for b_tok in draw(st.lists(tok, max_size=2, unique=True), label=f"biased {rid}"):
            bias.setdefault(b_tok, draw(_BIAS, label=f"bias {rid}"))
        fields["logit_bias"] = tuple(sorted((t_, b) for t_, b in bias.items() if b != 0.0))
    if REQUEST_STOP_TOKENS in families:
        stops = tuple(draw(st.lists(tok, max_size=2, unique=True), label=f"stop ids {rid}"))
        fields["stop_token_ids"] = stops
        if "ignore_eos" not in refused:
            fields["ignore_eos"] = eos is not None and draw(st.booleans(), label=f"ignore_eos {rid}")
        if stops and REQUEST_LOGIT_BIAS in families and stops[0] not in bias:
            # Pulled up a little, a stop token wins some positions, the middle of an accepted block among them.
            pull = draw(st.sampled_from([0.0, 2.0, 1.0, 3.0]), label=f"stop pull {rid}")
            fields["logit_bias"] = tuple(sorted(fields.get("logit_bias", ()) + (((stops[0], pull),) if pull else ())))
    return RequestSpec(rid, prompt, t, max_new, eos, k, p, **fields)


@st.composite
def request_loop_cases(draw, *, engine=None, greedy=None, max_requests=3, whole_request=True) -> LoopCase:
    """An engine configuration it runs and 1..max_requests whole requests; the first may join later than the rest.
    `whole_request`: for a whole-request contract (its ragged modes need request.ragged), else another step one's."""
    spec = draw(engine_specs(verify_mode=_modes_for(engine, requests=whole_request)), label="spec")
    # Half the time the oracle drafter: whole blocks accepted, so a column reading the wrong history, or a stop token
    # inside the block, lands in what is emitted.
    spec = replace(spec, drafter=draw(st.sampled_from(("oracle", spec.drafter)), label="drafter"))
    fams = families_of(engine)
    n = draw(st.integers(1, max_requests), label="n_requests")
    refused = refused_of(engine)
    reqs = tuple(draw(whole_requests(i, spec.vocab_size, spec.gamma, families=fams, greedy=greedy, refused=refused),
                      label=f"request {i}") for i in range(n))
    return LoopCase(spec, reqs)


# The verify batch's parameter values are dyadic, and its logits small integers: every processed logit is exact in
# float32 and float64 alike, so an exact tie is the same tie on both sides (the step level's REQ-001 draws the rest).
_V_ADDITIVE = st.sampled_from([0.0, 2.0, -2.0, 1.0, 0.5, -0.5, 1.5, -1.0])
_V_SCALING = st.sampled_from([1.0, 2.0, 0.5, 0.25])
_V_BIAS = st.sampled_from([2.0, -2.0, 4.0, -4.0, 1.0, 0.5, -8.0])


@st.composite
def _verify_row(draw, i: int, vocab: int, gamma: int, families, sem) -> RequestVerifyRow:
    tok = st.integers(0, vocab - 1)
    prompt = tuple(draw(st.lists(tok, min_size=1, max_size=3), label=f"prompt {i}"))
    output = tuple(draw(st.lists(tok, min_size=1, max_size=6), label=f"output {i}"))  # the anchor last
    n = draw(st.sampled_from([gamma, 1]) | st.integers(0, gamma), label=f"drafts {i}")
    fields: dict = {}
    if REQUEST_PENALTIES in families:
        fields.update(frequency_penalty=draw(_V_ADDITIVE, label=f"frequency {i}"),
                      presence_penalty=draw(_V_ADDITIVE, label=f"presence {i}"),
                      repetition_penalty=draw(_V_SCALING, label=f"repetition {i}"))
    eos = draw(st.none() | tok, label=f"eos {i}")
    if REQUEST_MIN_NEW_TOKENS in families:
        # The counter's edge inside this block: masked for none, some, all columns, or all but the bonus.
        edge = draw(st.sampled_from([0, 1, n, n + 1]) | st.integers(0, n + 2), label=f"min_new past output {i}")
        fields["min_new_tokens"] = len(output) + edge if edge else draw(st.sampled_from([0, 1]), label=f"min_new {i}")
        if eos is None and fields["min_new_tokens"]:
            eos = draw(tok, label=f"masked eos {i}")
        stops = draw(st.lists(tok, max_size=2, unique=True), label=f"masked stop ids {i}")
        fields["stop_token_ids"] = tuple(s for s in stops if s != eos)
    if REQUEST_LOGIT_BIAS in families:
        biased = draw(st.lists(tok, max_size=2, unique=True), label=f"biased {i}")
        fields["logit_bias"] = tuple(sorted((b, draw(_V_BIAS, label=f"bias {i}")) for b in biased))
    req = RequestSpec(i, prompt, 0.0, 64, eos, **fields)
    logits = tuple(tuple(draw(st.lists(st.integers(-4, 4), min_size=vocab, max_size=vocab), label=f"logits {i}.{j}"))
                   for j in range(n + 1))
    # Drafts: the target's raw argmax (a drafter blind to the parameters), the parameters' argmax (every column
    # accepted: the bonus reads the whole block), or any token.
    mode = draw(st.sampled_from(["raw", "processed", "any"]), label=f"draft mode {i}")
    drafts: list = []
    for j in range(n):
        if mode == "any":
            drafts.append(draw(tok, label=f"draft {i}.{j}"))
            continue
        x = (request_oracle.processed_logits(logits[j], prompt, output + tuple(drafts), req, sem)
             if mode == "processed" else torch.tensor(logits[j], dtype=torch.float64))
        drafts.append(int(oracle.lowest_argmax(x)))
    return RequestVerifyRow(req, output, tuple(drafts), logits)


@st.composite
def request_verify_cases(draw, *, engine=None, max_rows=4) -> RequestVerifyCase:
    """A ragged greedy verify batch of whole requests over the families this engine's pack exercises at the verify
    level; a row's families are each on or off, so only some rows carry a parameter."""
    fams = [f for f in FAMILIES if f in VERIFY_FAMILIES and (engine is None or f in engine.capabilities)]
    sem = getattr(engine, "request_semantics", request_oracle.DEFAULT_SEMANTICS)
    vocab = draw(st.sampled_from([5, 4, 8]), label="vocab")
    gamma = draw(st.sampled_from([3, 1]) | st.integers(1, 4), label="gamma")
    bs = draw(st.integers(1, max_rows), label="bs")
    rows = []
    for i in range(bs):
        on = [f for f in fams if draw(st.booleans(), label=f"row {i} {f}")]
        rows.append(draw(_verify_row(i, vocab, gamma, on, sem), label=f"row {i}"))
    return RequestVerifyCase(vocab, gamma, tuple(rows))
