"""Which verify modes a statistical step contract draws its configurations in, on a given engine.

Static always. With `step.ragged`, the first configuration of each ragged mode (cap-accept, compact) as well; with
`step.ragged-laws`, every configuration. An engine whose requests are slow to draw (SGLang's step level: a real
Scheduler, kernels interpreted) runs each ragged mode's law once instead of multiplying the check's time, while the
decode-loop contracts draw every mode alike; the capability table shows which."""

from __future__ import annotations

from contracts.protocol import STEP_RAGGED, STEP_RAGGED_LAWS


def law_configs(engine, configs, mode_of=lambda c: c[0]) -> list:
    """The items of `configs` (in order) this engine runs; `mode_of(item)` is the item's verify mode."""
    caps = engine.capabilities
    seen: set = set()
    out = []
    for c in configs:
        mode = mode_of(c)
        if mode == "static" or STEP_RAGGED_LAWS in caps or (STEP_RAGGED in caps and mode not in seen):
            out.append(c)
        seen.add(mode)
    return out
