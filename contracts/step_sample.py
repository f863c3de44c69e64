"""A short decode run on an engine's step level, for the report's pictures (not a contract).

It drives the adapter protocol only (`contracts.boundary.engine`): a fresh engine,
a handful of greedy requests, a few steps; per step it keeps the verify lengths,
accept lengths (accepted drafts) and tau = tokens committed per target forward
(one forward per live request per step).
"""

from __future__ import annotations

from contracts import protocol

REQUESTS, GAMMA, MODE, STEPS, VOCAB = 8, 4, "compact", 12, 16
BUDGET_FRAC = 0.5  # a forced budget, so the planner trims blocks and the verify lengths vary


def sample_steps(engine, *, requests: int = REQUESTS, gamma: int = GAMMA, steps: int = STEPS,
                 verify_mode: str | None = None) -> dict:
    """{"gamma", "verify_mode", "requests", "steps": [{"verify_lens", "accept_lens", "commit_lens", "tau"}]}.

    Without the step capability: {"skipped": "no step level"}. An engine error is
    reported as {"error": "Type: message"}, since the contracts, not this, judge the engine.
    `verify_mode` None: compact with a forced budget where the engine runs the ragged modes (step.ragged),
    else static without one, as the decode-loop machine picks its specs (contracts.machine.engine_specs).
    """
    for name, value in (("requests", requests), ("gamma", gamma), ("steps", steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    if protocol.STEP not in engine.capabilities:
        return {"skipped": "no step level"}
    from contracts.boundary.engine import EngineSpec, RequestSpec
    from contracts.machine import join_via

    if verify_mode is None:  # the modes the decode-loop machine drives this engine in (its engine_specs)
        from contracts.machine import engine_specs

        verify_mode = MODE if any(s.verify_mode == MODE for s in engine_specs(engine)) else "static"
    budget = BUDGET_FRAC if verify_mode != "static" else None  # static mode verifies every block whole
    out = {"gamma": gamma, "verify_mode": verify_mode, "requests": requests, "budget_frac": budget, "steps": []}
    try:
        max_new = steps * (gamma + 1)
        spec = EngineSpec(vocab_size=VOCAB, gamma=gamma, verify_mode=verify_mode, force_budget_frac=budget,
                          pool_size=max(16, requests), max_context_len=max_new + 4 * (gamma + 1) + 8)
        handle = engine.new_engine(spec)
        engine.add_requests(handle, [RequestSpec(i, (i % VOCAB, (7 * i + 3) % VOCAB), max_new_tokens=max_new)
                                     for i in range(requests)], join_via(engine, "local"))
        live = set(range(requests))
        for _ in range(steps):
            if not live:
                break
            view = engine.step(handle)
            if not view.rids:
                break
            commits = [int(c) for c in view.commit_lens]
            out["steps"].append({"verify_lens": [int(v) for v in view.verify_lens],
                                 "accept_lens": [int(c) for c in view.correct_lens], "commit_lens": commits,
                                 "tau": sum(commits) / len(view.rids)})
            live -= set(view.finished)
    except Exception as e:  # noqa: BLE001 - shown on the page, never raised
        out["error"] = f"{type(e).__name__}: {e}"
    return out
