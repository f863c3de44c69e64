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


def _trims(case) -> bool:
    """Several steps under a forced verify budget below the whole block and with an SPS table: a ragged mode then
    trims blocks and predicts its step time, so an observer of trimmed blocks or of predictions sees some (a static
    mode ignores both fields)."""
    s = case.spec
    return (_several_steps(case) and s.gamma >= 2 and s.sps is not None
            and s.force_budget_frac is not None and s.force_budget_frac < 1)


def _plain(case):
    """The case with every whole-request parameter at its off value (always admitted)."""
    return replace(case, requests=tuple(replace(r, **PARAMETER_DEFAULTS) for r in case.requests))


def every_option_once(*, engine) -> tuple:
    """One fixed case per exercised option, so each check turns every declared option on at least once (the drawn
    cases add more): the first request set the engine's own strategy generates with a greedy and a sampled request of
    at least 4 tokens each, under a verify budget that trims blocks (`_trims`; else the pair alone, else any request
    set), its whole-request parameters off
    (observers skip a step whose logits carry penalties or a bias, so they would see nothing). Deterministic:
    Hypothesis' `find`, derandomized, generates the same case every run; it is not shrunk (a quarter second, not two)."""
    names = [o.name for o in exercised_options(engine)]
    if not names:
        return ()
    quiet = settings(database=None, derandomize=True, max_examples=2000,
                     suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    strategy = request_loop_cases(engine=engine, whole_request=False)
    base = None
    for wanted in (_trims, _several_steps, lambda case: True):  # the first the engine's strategy generates
        try:
            base = find(strategy, wanted, settings=quiet)
            break
        except NoSuchExample:
            continue
    return tuple(OptionCase(name, _plain(base)) for name in names)
