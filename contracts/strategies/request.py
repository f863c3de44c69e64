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

from hypothesis import strategies as st

from contracts.boundary.engine import LoopCase, RequestSpec
from contracts.protocol import (
    REQUEST,
    REQUEST_LOGIT_BIAS,
    REQUEST_MIN_NEW_TOKENS,
    REQUEST_MIN_P,
    REQUEST_PENALTIES,
    REQUEST_STOP_TOKENS,
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


@st.composite
def whole_requests(draw, rid: int, vocab_size: int, gamma: int, *, families=FAMILIES, greedy=None) -> RequestSpec:
    """One request: prompt 1..4 tokens, max_new_tokens 1..10, greedy or sampled, and the parameter families given,
    each on or off."""
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
        fields["ignore_eos"] = eos is not None and draw(st.booleans(), label=f"ignore_eos {rid}")
        if stops and REQUEST_LOGIT_BIAS in families and stops[0] not in bias:
            # Pulled up a little, a stop token wins some positions, the middle of an accepted block among them.
            pull = draw(st.sampled_from([0.0, 2.0, 1.0, 3.0]), label=f"stop pull {rid}")
            fields["logit_bias"] = tuple(sorted(fields.get("logit_bias", ()) + (((stops[0], pull),) if pull else ())))
    return RequestSpec(rid, prompt, t, max_new, eos, k, p, **fields)


@st.composite
def request_loop_cases(draw, *, engine=None, greedy=None, max_requests=3) -> LoopCase:
    """An engine configuration it runs and 1..max_requests whole requests; the first may join later than the rest."""
    spec = draw(engine_specs(verify_mode=_modes_for(engine)), label="spec")
    # Half the time the oracle drafter: whole blocks accepted, so a column reading the wrong history, or a stop token
    # inside the block, lands in what is emitted.
    spec = replace(spec, drafter=draw(st.sampled_from(("oracle", spec.drafter)), label="drafter"))
    fams = families_of(engine)
    n = draw(st.integers(1, max_requests), label="n_requests")
    reqs = tuple(draw(whole_requests(i, spec.vocab_size, spec.gamma, families=fams, greedy=greedy), label=f"request {i}")
                 for i in range(n))
    return LoopCase(spec, reqs)
