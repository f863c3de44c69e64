"""Option cases: one of the engine's declared passive or output-preserving options, and whole requests to serve with
it off and on (greedy and sampled, with the parameters the pack exercises)."""

from __future__ import annotations

from hypothesis import strategies as st

from contracts.boundary.engine import OptionCase
from contracts.strategies.request import request_loop_cases


def exercised_options(engine) -> tuple:
    return tuple(o for o in getattr(engine, "engine_options", ()) if not o.not_exercised)


@st.composite
def option_cases(draw, *, engine=None) -> OptionCase:
    names = [o.name for o in exercised_options(engine)]
    option = draw(st.sampled_from(names), label="option")
    return OptionCase(option, draw(request_loop_cases(engine=engine), label="case"))
