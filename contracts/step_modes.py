"""Which verify modes the step contracts draw on a given engine.

`step.ragged`: the decode-loop contracts (and the other step strategies) draw the ragged modes (cap-accept, compact)
besides static. The statistical contracts (DIST-001, DIST-002, REQ-003: thousands of requests per configuration) run
their ragged configurations only with `step.ragged-laws`, and the whole-request contracts draw ragged modes only
with `request.ragged`: an engine whose requests are slow to draw (SGLang's step level: a real Scheduler, kernels
interpreted) can run the decode loop in every mode within the check's time, and the capability table shows the gap."""

from __future__ import annotations

from contracts.protocol import REQUEST_RAGGED, STEP_RAGGED, STEP_RAGGED_LAWS


def law_configs(engine, configs, mode_of=lambda c: c[0], *, requests: bool = False) -> list:
    """The items of `configs` (in order) this engine runs: static ones, and ragged ones with step.ragged-laws (and,
    for a whole-request contract, `requests`, request.ragged too); `mode_of(item)` is the item's verify mode."""
    ragged = draws_ragged(engine, requests=requests) and STEP_RAGGED_LAWS in engine.capabilities
    return [c for c in configs if mode_of(c) == "static" or ragged]


def draws_ragged(engine, *, requests: bool = False) -> bool:
    """Whether a step strategy draws the ragged verify modes for this engine (a whole-request one: `requests`)."""
    caps = set(engine.capabilities)
    return STEP_RAGGED in caps and (not requests or REQUEST_RAGGED in caps)
