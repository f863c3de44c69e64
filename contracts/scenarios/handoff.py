"""PD handoff -> process_prebuilt -> (relay) -> first decode, observed end to end."""

from __future__ import annotations

import hypothesis

from contracts.boundary.handoff import HandoffCase, HandoffObservation, RelayEvent


def _err(e: Exception) -> str:
    return f"{type(e).__name__}: {e}"


def record_relay(future_map) -> list:
    """Record publish/stash calls on a real relay object, then let them run.

    Not a mock: the engine's own FutureMap still does the work; this only
    wraps the two bound methods on that instance.
    """
    events: list = []
    publish, stash = future_map.publish, future_map.stash

    def recorded_publish(indices, new_seq_lens, *args, **kwargs):
        events.append(RelayEvent("publish", indices.tolist(), new_seq_lens.tolist()))
        return publish(indices, new_seq_lens, *args, **kwargs)

    def recorded_stash(indices, payload, *args, **kwargs):
        events.append(RelayEvent("stash", indices.tolist(), payload.bonus_tokens.tolist()))
        return stash(indices, payload, *args, **kwargs)

    future_map.publish, future_map.stash = recorded_publish, recorded_stash
    return events


def observe_handoff(engine, case: HandoffCase) -> HandoffObservation:
    if case.algorithm not in engine.handoff_algorithms:
        hypothesis.reject()  # an algorithm the engine does not build is not sent to it
    batch = engine.new_prebuilt_batch(case)
    future_map = engine.new_future_map(batch)
    obs = HandoffObservation(draft_input=None, rows=list(engine.batch_rows(batch)),
                             relay_before=engine.relay_snapshot(future_map))
    obs.relay_events = record_relay(future_map)
    try:
        engine.process_prebuilt(batch, future_map)
    except Exception as e:
        obs.handoff_error = _err(e)
        return obs
    obs.relay_after = engine.relay_snapshot(future_map)
    obs.draft_input = engine.draft_input_view(batch)
    try:
        engine.prepare_for_decode(batch)
    except Exception as e:
        obs.first_decode_error = _err(e)
        return obs
    if case.enable_overlap:
        try:
            obs.resolved = engine.resolve_relay(batch, future_map)
        except Exception as e:
            obs.resolve_error = _err(e)
    return obs
