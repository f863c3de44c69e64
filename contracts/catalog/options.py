"""Options an engine documents as changing no output: passive ones (metrics, dumps, recorders, tracing) and
output-preserving modes (overlap scheduling, a kernel backend). Each runs off and on over the same requests, in fresh
engines of the same configuration: the same greedy tokens, and for an option that promises it (`same_seed`) on an
engine whose sampling is seeded, the same sampled tokens too. A mode that moves the schedule (and so the draws) keeps
only the law, which the law contracts check in either setting."""

from __future__ import annotations

from dataclasses import replace

from contracts.boundary.engine import OptionCase
from contracts.checks import expect_equal
from contracts.machine import serve
from contracts.protocol import OPTIONS, STEP, STEP_SEEDED_SAMPLING
from contracts.registry import contract
from contracts.strategies.options import every_option_once, option_cases


def _outputs(engine, case, options) -> dict:
    handle = serve(engine, replace(case, spec=replace(case.spec, options=options)))
    return {v.rid: (list(v.output), v.finish_reason) for v in engine.request_views(handle)}


@contract("OPT-001", "each option the engine documents as passive or output-preserving changes no output: over the "
          "same requests and engine configuration, on and off give the same greedy tokens and finish reasons, and the "
          "same sampled tokens for the same seed where the option promises it and the engine's sampling is seeded",
          requires={STEP, OPTIONS}, cases=lambda *, engine: option_cases(engine=engine), max_examples=40,
          examples=every_option_once)
def options_change_no_output(engine, case: OptionCase):
    opt = next(o for o in engine.engine_options if o.name == case.option)
    off = _outputs(engine, case.case, ((opt.name, opt.off),))
    on = _outputs(engine, case.case, ((opt.name, opt.value),))
    same_seed = opt.same_seed and STEP_SEEDED_SAMPLING in engine.capabilities
    for r in case.case.requests:
        if r.greedy or same_seed:
            kind = "greedy" if r.greedy else "sampled, same seed"
            expect_equal(f"request {r.rid} ({kind}): tokens and finish reason with {opt.name}={opt.value} "
                         f"(expected: with {opt.name}={opt.off})", off[r.rid], on[r.rid])
