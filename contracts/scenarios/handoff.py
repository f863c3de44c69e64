"""PD handoff -> admission on the decode side -> (relay) -> first decode, observed end to end."""

from __future__ import annotations

import hypothesis

from contracts.boundary.handoff import HandoffCase, HandoffObservation


def _err(e: Exception) -> str:
    return f"{type(e).__name__}: {e}"


def observe_handoff(engine, case: HandoffCase) -> HandoffObservation:
    if case.algorithm not in engine.handoff_algorithms:
        hypothesis.reject()  # an algorithm the engine does not build is not sent to it
    batch = engine.new_handoff_batch(case)
    relay = engine.new_relay(batch)
    obs = HandoffObservation(draft_input=None, rows=list(engine.batch_rows(batch)),
                             relay_before=engine.relay_snapshot(relay))
    obs.relay_events = engine.record_relay(relay)
    try:
        engine.admit_handoff(batch, relay)
    except Exception as e:
        obs.handoff_error = _err(e)
        return obs
    obs.relay_after = engine.relay_snapshot(relay)
    obs.draft_input = engine.draft_input_view(batch)
    try:
        engine.prepare_for_decode(batch)
    except Exception as e:
        obs.first_decode_error = _err(e)
        return obs
    if case.enable_overlap:
        try:
            obs.resolved = engine.resolve_relay(batch, relay)
        except Exception as e:
            obs.resolve_error = _err(e)
    return obs
