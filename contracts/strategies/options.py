"""Option cases: one of the engine's declared passive or output-preserving options, and whole requests to serve with
it off and on (greedy and sampled, with the parameters the pack exercises)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from contracts.boundary.engine import OptionCase
from contracts.request_oracle import PARAMETER_DEFAULTS
from contracts.strategies.request import request_loop_cases


def exercised_options(engine) -> tuple:
    return tuple(o for o in getattr(engine, "engine_options", ()) if not o.not_exercised)


@st.composite
def option_cases(draw, *, engine=None) -> OptionCase:
    names = [o.name for o in exercised_options(engine)]
    option = draw(st.sampled_from(names), label="option")
    return OptionCase(option, draw(request_loop_cases(engine=engine, whole_request=False), label="case"))


def _several_steps(case) -> bool:
    reqs = case.requests
    return (len(reqs) >= 2 and any(r.greedy for r in reqs) and any(not r.greedy for r in reqs)
            and min(r.max_new_tokens for r in reqs) >= 4)


# A request sampled at its temperature alone runs this long in the fixed case: an estimate of what a trimmed block
# would have accepted (SGLang's) settles over the steps after the trim, which a request of the strategy's length and
# EOS rarely reaches (one planned step in SGLang's case).
LONG_RUN_TOKENS = 16


def _pure_sampled(r) -> bool:
    return not r.greedy and r.top_k == 0 and r.top_p == 1


def _trims(case) -> bool:
    """Several steps under a forced verify budget below the whole block and with an SPS table: a ragged mode then
    trims blocks and predicts its step time, so an observer of trimmed blocks or of predictions sees some (a static
    mode ignores both fields). One sampled request samples at its temperature alone: an estimate of what a trimmed
    block would have accepted models only those rows (SGLang's skips top-k, top-p and min-p rows)."""
    s = case.spec
    return (_several_steps(case) and s.gamma >= 2 and s.sps is not None
            and s.force_budget_frac is not None and s.force_budget_frac < 1
            and any(map(_pure_sampled, case.requests)))


def _fixed(case):
    """The case with every whole-request parameter at its off value, and each request sampled at its temperature
    alone running LONG_RUN_TOKENS tokens without an EOS (both always admitted)."""
    def fixed(r):
        r = replace(r, **PARAMETER_DEFAULTS)
        return replace(r, eos_id=None, max_new_tokens=max(r.max_new_tokens, LONG_RUN_TOKENS)) if _pure_sampled(r) else r

    return replace(case, requests=tuple(map(fixed, case.requests)))


def every_option_once(*, engine) -> tuple:
    """One fixed case per exercised option, so each check turns every declared option on at least once (the drawn
    cases add more): the first request set the engine's own strategy generates with a greedy and a sampled request of
    at least 4 tokens each, under a verify budget that trims blocks (`_trims`; else the pair alone, else any request
    set), its whole-request parameters off (observers skip a step whose logits carry penalties or a bias, so they
    would see nothing), its requests sampled at their temperature alone run longer (`_fixed`). Deterministic:
    Hypothesis' `find`, derandomized, generates the same case every run; it is not shrunk (two seconds on SGLang,
    whose strategy rarely draws `_trims`)."""
    names = [o.name for o in exercised_options(engine)]
    if not names:
        return ()
    quiet = settings(database=None, derandomize=True, max_examples=2000,
                     suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    strategy = request_loop_cases(engine=engine, whole_request=False)
    for wanted in (_trims, _several_steps):  # the first the engine's strategy generates
        try:
            base = find(strategy, wanted, settings=quiet)
            break
        except NoSuchExample:
            continue
    else:
        base = find(strategy, lambda case: True, settings=quiet)
    return tuple(OptionCase(name, _fixed(base)) for name in names)
