"""SGLang's SGLANG_DSPARK_* settings and DSpark server arguments as engine options (OPT-001): each one classified,
applied the way SGLang reads it (its env registry or ServerArgs, while the engine's Scheduler is built and around
each call), reaching the code it switches, restored after; and OPT-001 catching an observer that is not passive."""

from __future__ import annotations

import logging
import os
from dataclasses import replace

import pytest

from contracts.adapters.sglang import options as sglang_options
from contracts.boundary.engine import EngineSpec, LoopCase, OptionCase, RequestSpec
from contracts.machine import serve
from contracts.violation import ContractViolation, Mismatch
from tests.caught import guarded_patches

DECLARED = {o.name for o in sglang_options.ENGINE_OPTIONS}
EXERCISED = {o.name: o for o in sglang_options.ENGINE_OPTIONS if not o.not_exercised}
# A greedy request whose drafts are partly rejected (vanilla drafter), so every accept path runs.
CASE = LoopCase(EngineSpec(vocab_size=6, gamma=3, drafter="vanilla"),
                (RequestSpec(0, (0, 2), max_new_tokens=12), RequestSpec(1, (3,), temperature=1.0, max_new_tokens=6)))


def test_every_sglang_dspark_setting_is_classified(sglang_engine):
    names = set(sglang_engine.option_names())
    assert names and all(n.startswith(("SGLANG_DSPARK_", sglang_options.SERVER_ARG_PREFIX))
                         or n == sglang_options.VERIFY_MODE for n in names)
    assert sglang_options.VERIFY_MODE in names and sglang_options.SERVER_ARG_OPTIONS <= names
    assert not names & set(sglang_options.CASE_SERVER_ARGS)  # the case's own configuration, not options
    assert DECLARED | set(sglang_options.UNDECLARED) == names
    assert not DECLARED & set(sglang_options.UNDECLARED)
    # The report lists exactly the undeclared ones.
    from contracts.report import option_declarations

    assert option_declarations(sglang_engine)["unlisted"] == sorted(sglang_options.UNDECLARED)
    assert len(EXERCISED) >= 6


@pytest.mark.parametrize("options, field", [
    ((("SGLANG_DSPARK_NO_SUCH", "1"),), "is not an option"),
    ((("SGLANG_DSPARK_FUSED_ACCEPT_TAIL", "1"),), "static verify epilogue"),
    ((("SGLANG_DSPARK_USE_GREEDY_DRAFT", "maybe"),), "is not a value SGLang parses"),
    ((("SGLANG_DSPARK_BLOCK_ACCEPT_ESTIMATE_PATH", "/tmp/x"),), "inside the engine's temp dir"),
    (((sglang_options.STS_PATH, "../sts.json"),), "inside the engine's temp dir"),
    (((sglang_options.ALIGN_TO_TIER, "true"),), "captures no graph"),
])
def test_bad_options_are_refused_naming_the_field(sglang_engine, options, field):
    with pytest.raises(ValueError, match=f"^options: .*{field}"):
        sglang_options.overrides(options)


def test_settings_are_restored_after_a_raising_call(sglang_engine):  # OptionEnv reads SGLang's env registry
    env = sglang_options.OptionEnv({"SGLANG_DSPARK_USE_GREEDY_DRAFT": "1"})
    try:
        with pytest.raises(RuntimeError), env.applied():
            assert os.environ["SGLANG_DSPARK_USE_GREEDY_DRAFT"] == "1"
            raise RuntimeError("a case that fails mid-run")
        assert "SGLANG_DSPARK_USE_GREEDY_DRAFT" not in os.environ
    finally:
        env.close()
    assert not os.path.exists(env.tmpdir)


def _reached(worker, name) -> bool:
    """Whether the setting switched SGLang's own code on in this engine's worker (read back from SGLang's objects)."""
    obs = worker._observers
    dumper = obs._info_dumper
    if name == "SGLANG_DSPARK_DEBUG_DUMP":  # `all`: the GPU-time segments and each row's detail were recorded too
        return dumper.enabled and any(r.reqs and r.draft_gpu_ms is not None for r in dumper._records)
    if name == "SGLANG_DSPARK_ENABLE_SPS_RECORD":
        return dumper.enabled and len(dumper._records) > 0
    if name == "SGLANG_DSPARK_LOG_SPS_PRED_INTERVAL":  # it times each step on the device clock for its log
        return dumper._sps_report_interval > 0 and any(r.step_gpu_ms is not None for r in dumper._records)
    if name in ("SGLANG_DSPARK_BLOCK_ACCEPT_ESTIMATE_PATH", "SGLANG_DSPARK_BLOCK_ACCEPT_ONLINE_INTERVAL"):
        return obs._block_accept_recorder is not None
    if name == "SGLANG_DSPARK_USE_GREEDY_DRAFT":
        return worker._greedy_draft is True
    if name == "SGLANG_DSPARK_STACKED_CTX_KV":  # off: the per-layer projections, no stacked weight ever built
        return getattr(worker.draft_model, "_stacked_ctx_kv_cache", False) is False
    planner = worker._verify_planner
    if name == sglang_options.VERIFY_MODE:  # compact: a confidence head and the packed verify
        return planner.is_compact_mode and worker.draft_model.confidence_head is not None
    if name == "SGLANG_DSPARK_DEBUG_CONFIDENCE_METRICS":  # the probe kept per-position metrics of real steps
        return obs._confidence_probe._step_ct > 0
    if name == "SGLANG_DSPARK_STS_COLLECT_PATH":
        return obs._sts_recorder is not None
    if name == "SGLANG_DSPARK_CONFIDENCE_RELAY_LAG_STEPS":  # value 1: no carry ring on top of the relay's own lag
        return planner.lag_steps == 1
    if name == sglang_options.STS_PATH:  # the file's temperatures, one a position, on the head the planner reads
        head = planner._confidence_head  # None in static verify
        want = [sglang_options.STS_TEMPERATURES[i % 3] for i in range(planner.gamma)]
        return head is not None and head.sts_temperatures.tolist() == want
    raise AssertionError(f"no reach check for {name}: add one with the option")


def _logged_schedules(caplog) -> int:
    return sum("[DSPARK-CPS]" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("name", sorted(EXERCISED))
def test_each_exercised_option_reaches_its_code_and_is_scoped_to_its_engine(sglang_engine, name, caplog):
    opt = EXERCISED[name]
    caplog.set_level(logging.INFO, logger="sglang.srt.speculative.dspark_components.dspark_planner")
    on = serve(sglang_engine, replace(CASE, spec=replace(CASE.spec, options=((name, opt.value),))))
    if name == "SGLANG_DSPARK_DEBUG_CONFIDENCE_PREFIX_SCHEDULER":  # a log line per planned step, nothing kept
        assert _logged_schedules(caplog) > 0, name
    else:
        assert _reached(on.slot.scheduler.draft_worker, name), name
    if name in sglang_options.RAGGED_OPTIONS:  # read only in a ragged mode
        assert on.slot.mode == "cap-accept"
    assert name not in os.environ  # set only while SGLang builds and runs this engine
    if name in sglang_options.PATH_OPTIONS:  # the writer writes inside the engine's own temp dir
        path = {**on.slot.options.values, **on.slot.options.server_args}[name]
        assert path.startswith(on.slot.options.tmpdir + os.sep)
    caplog.clear()
    off = serve(sglang_engine, CASE)
    if name == "SGLANG_DSPARK_DEBUG_CONFIDENCE_PREFIX_SCHEDULER":
        assert _logged_schedules(caplog) == 0, f"{name} leaked into an engine without options"
    else:
        assert not _reached(off.slot.scheduler.draft_worker, name), f"{name} leaked into an engine without options"


def _observer_writes_the_bonus(mp):
    """An info dump that is not passive: it masks the step's bonus (the target's correction) in place."""
    from sglang.srt.speculative.dspark_components import dspark_observability

    real = dspark_observability.DsparkStepObservers.observe_verify_step

    def observe_verify_step(self, **kw):
        real(self, **kw)
        if self._info_dumper.enabled:
            kw["bonus"].fill_(0)

    mp.setattr(dspark_observability.DsparkStepObservers, "observe_verify_step", observe_verify_step)


def test_opt001_catches_an_observer_that_writes_into_the_step(sglang_engine):
    from contracts.catalog.options import options_change_no_output

    case = OptionCase("SGLANG_DSPARK_DEBUG_DUMP", CASE)
    options_change_no_output(sglang_engine, case)  # intact: passes
    with guarded_patches() as mp:
        _observer_writes_the_bonus(mp)
        with pytest.raises((Mismatch, ContractViolation)) as caught:
            options_change_no_output(sglang_engine, case)
    assert "SGLANG_DSPARK_DEBUG_DUMP=all" in str(caught.value), str(caught.value)
