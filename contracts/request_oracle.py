"""What a whole request means, written down once, and its float64 laws: the request-level oracle.

Every parameter reads the request's committed output: the tokens it has emitted, the first sampled one included.
Never a draft that was not accepted, never a rejected token. A verify column reads the output the request would
have if the candidates before the column were committed, which is what plain decoding would have read at that
position: that is the whole losslessness promise for parameters that depend on history.

The next token's logits, from the target's raw logits, in this order (SGLang's `acc_additive_penalties`, then
`acc_scaling_penalties`, then `logit_bias`; a pack whose engine documents another order says so through
`RequestSemantics`):

1. additive: ``- frequency_penalty * count(t) - presence_penalty * [count(t) > 0]``, counts over the output;
   while ``len(output) < min_new_tokens``, the EOS id and every stop token id get ``-inf`` (whether or not the
   request ignores EOS: min_new_tokens masks them all, as SGLang's penalizer does);
2. scaling: for every token the output holds (the prompt's too, where the semantics say so), a logit ``x`` becomes
   ``x * r`` if ``x < 0`` else ``x / r`` (``r = repetition_penalty``);
3. ``logit_bias[t]`` added.

A greedy request emits the lowest argmax of these logits. A sampled one draws from ``softmax(logits / T)`` cut
to top-k, then top-p (renormalised after each, `oracle.sampling_law`), then to the tokens whose probability is at
least ``min_p`` times the largest (min_p keeps the likeliest token, so it reads the same before or after the
top-k/top-p cuts, which keep it too).

A request ends after the first token that is its EOS id (unless it ignores EOS) or one of its stop token ids,
that token emitted, or after max_new_tokens tokens. Tokens a verify accepted past that point are not emitted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import fields
from typing import Callable, Optional

import torch

from contracts import oracle
from contracts.boundary.engine import RequestSemantics, RequestSpec
from contracts.protocol import REQUEST_PARAMETERS, STEP

F64 = torch.float64
DEFAULT_SEMANTICS = RequestSemantics()
# The whole-request parameters (those a request.* capability exercises), with the value that turns each off:
# RequestSpec's default.
PARAMETER_DEFAULTS = {f.name: f.default for f in fields(RequestSpec)
                      if REQUEST_PARAMETERS.get(f.name, STEP) not in (None, STEP)}


def parameters_used(req: RequestSpec) -> frozenset:
    """The whole-request parameters a request sets (away from their off value)."""
    return frozenset(k for k, off in PARAMETER_DEFAULTS.items() if getattr(req, k) != off)


def stop_ids(req: RequestSpec, semantics: RequestSemantics = DEFAULT_SEMANTICS) -> frozenset:
    """The tokens that end the request when emitted."""
    if req.ignore_eos and semantics.ignore_eos_ignores_stop_ids:
        return frozenset()
    eos = () if req.eos_id is None or req.ignore_eos else (req.eos_id,)
    return frozenset(eos) | frozenset(req.stop_token_ids)


def processed_logits(logits, prompt, output, req: RequestSpec, semantics: RequestSemantics = DEFAULT_SEMANTICS):
    """The logits the next token is chosen from, float64 [V], after `output` (the emitted tokens so far)."""
    x = torch.as_tensor(logits, dtype=F64).clone()
    counts = Counter(int(t) for t in output)

    def additive():
        for tok, n in counts.items():
            x[tok] -= req.frequency_penalty * n + req.presence_penalty
        if len(output) < req.min_new_tokens:
            for tok in ({req.eos_id} if req.eos_id is not None else set()) | set(req.stop_token_ids):
                x[tok] = float("-inf")

    def scaling():
        if req.repetition_penalty == 1.0:
            return
        seen = set(counts) | (set(int(t) for t in prompt) if semantics.repetition_counts_prompt else set())
        for tok in seen:
            x[tok] = x[tok] * req.repetition_penalty if x[tok] < 0 else x[tok] / req.repetition_penalty

    steps = (scaling, additive) if semantics.repetition_before_additive else (additive, scaling)
    for step in steps:
        step()
    for tok, bias in req.logit_bias:
        x[tok] += bias
    return x


def next_law(logits, prompt, output, req: RequestSpec, semantics: RequestSemantics = DEFAULT_SEMANTICS) -> torch.Tensor:
    """The law of the next token, float64 [V]: a point mass for a greedy request."""
    x = processed_logits(logits, prompt, output, req, semantics)
    if req.greedy:
        return torch.nn.functional.one_hot(oracle.lowest_argmax(x), x.shape[-1]).to(F64)
    p = oracle.sampling_law(x, req.temperature, req.top_k, req.top_p)
    if req.min_p > 0:
        p = torch.where(p >= req.min_p * p.max(), p, 0.0)
        p = p / p.sum()
    return p


def finish_reason(output, req: RequestSpec, semantics: RequestSemantics = DEFAULT_SEMANTICS) -> Optional[str]:
    """Why a request with this output is done, or None while it goes on."""
    if output and int(output[-1]) in stop_ids(req, semantics):
        return "stop"
    return "length" if len(output) >= req.max_new_tokens else None


NextLogits = Callable[[list], torch.Tensor]  # the full sequence (prompt + output) -> the target's raw logits


def plain_greedy(next_logits: NextLogits, req: RequestSpec, semantics: RequestSemantics = DEFAULT_SEMANTICS) -> list:
    """Plain decoding of a greedy request, one target call per token: what speculation must reproduce."""
    out: list = []
    while finish_reason(out, req, semantics) is None:
        law = next_law(next_logits(list(req.prompt) + out), req.prompt, out, req, semantics)
        out.append(int(torch.argmax(law)))
    return out


def greedy_verify(prompt, output, drafts, logits, req: RequestSpec, semantics: RequestSemantics = DEFAULT_SEMANTICS) -> list:
    """What a greedy verify of `drafts` must emit: at column j (raw target logits `logits[j]`, read after the output
    and drafts[:j]), the processed argmax; the drafts while they match it, then the first mismatch's argmax, or the
    bonus after the last draft."""
    emitted: list = []
    for j, row in enumerate(logits[: len(drafts) + 1]):
        tok = int(oracle.lowest_argmax(processed_logits(row, prompt, list(output) + list(drafts[:j]), req, semantics)))
        emitted.append(tok)
        if j == len(drafts) or tok != drafts[j]:
            break
    return emitted


def output_law(next_logits: NextLogits, req: RequestSpec, semantics: RequestSemantics = DEFAULT_SEMANTICS) -> dict:
    """The exact law of a sampled request's whole output (a tuple of tokens, ended by its stop rule), by enumeration."""
    law, done = {(): 1.0}, {}
    while law:
        nxt = {}
        for seq, mass in law.items():
            probs = next_law(next_logits(list(req.prompt) + list(seq)), req.prompt, seq, req, semantics).tolist()
            for tok, p in enumerate(probs):
                if p > 0:
                    out = seq + (tok,)
                    target = done if finish_reason(out, req, semantics) is not None else nxt
                    target[out] = target.get(out, 0.0) + mass * p
        law = nxt
    return done
