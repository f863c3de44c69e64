"""SGLang's `SGLANG_DSPARK_*` settings, its verify mode and its DSpark server arguments as engine options (capability
`options`, contract OPT-001).

Each setting is an `EnvField` of SGLang's own registry (`sglang.srt.environ.envs`); SGLang reads it with `.get()`,
some when the Scheduler builds its DSpark worker (the observers, the greedy draft), some at every step (the
confidence metrics, the embedding and context-KV paths). So an engine with options gets a Scheduler of its own,
built and run with the settings applied through SGLang's own override (`EnvField.override`): set while that
Scheduler is built and around every call into it (`_Slot.env`), restored after each. It is never cached: the next
engine with options closes it, and its temp dir, where every setting that writes a file writes.

The classification below is read from SGLang 0.5.23's code (file and reader named with each); what the CPU step
level cannot turn on says why in `not_exercised`. Settings that change outputs on purpose (a simulation, a
precision) are not declared at all: `option_names()` lists every `SGLANG_DSPARK_*` setting, so the report names
them as unlisted.

A DSpark server argument (a `speculative_dspark_*` field of SGLang's ServerArgs) is declared by its field name and
passed to that Scheduler's ServerArgs; a file it reads (the STS calibration) is written into the engine's temp dir
first.

The verify mode (`SGLANG_RAGGED_VERIFY_MODE`) is declared here as an output-preserving option too: besides the
decode-loop contracts that run each mode (`step.ragged`), OPT-001 holds compact verify to static verify on the same
requests: static off, compact on, the same greedy tokens. The settings
read only in a ragged mode (`RAGGED_OPTIONS`: the draft's confidence, a trimmed block's estimate, a predicted budget)
run in cap-accept mode on and off alike (SGLang's confidence metrics ignore compact mode, whose padded rows corrupt
their labels), a ragged mode's Scheduler built with the case's SPS table and forced budget fraction.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import weakref
from dataclasses import replace

from contracts.boundary.engine import EngineOption

PREFIX = "SGLANG_DSPARK_"
# SGLang's verify mode (speculative/ragged_verify.py): not a SGLANG_DSPARK_* name, but the DSpark worker's mode switch.
VERIFY_MODE = "SGLANG_RAGGED_VERIFY_MODE"

_EPILOGUE = ("read only where DSparkWorkerV2 builds its static verify epilogue (dspark_worker_v2.py:410-425): a "
             "DeepSeek-V4.1 target with a MoE draft under CUDA/HIP graphs")
_V4_DRAFT = "read only by the DeepSeek-V4 draft model (models/deepseek_v4_dspark.py); the step level's drafter is DSparkDraftModel"
_TP_VOCAB = ("read by DSparkDraftModel.attach_shared_modules only for a vocab-parallel LM head (tp_size > 1, "
             "models/dspark.py:559); the step level runs TP 1")

# SGLang's DSpark server arguments (ServerArgs fields, arg_groups/fields/spec.py) are options too, named by field and
# passed to the Scheduler's ServerArgs; the two the case's spec sets itself are its configuration, not options.
SERVER_ARG_PREFIX = "speculative_dspark_"
CASE_SERVER_ARGS = {"speculative_dspark_block_size": "the case's gamma",
                    "speculative_dspark_sps_table_path": "the case's SPS table"}
STS_PATH = "speculative_dspark_confidence_sts_path"
ALIGN_TO_TIER = "speculative_dspark_align_verify_tokens_to_graph_tier"
SERVER_ARG_OPTIONS = frozenset({STS_PATH, ALIGN_TO_TIER})
# The STS calibration the pack writes for STS_PATH: per-position temperatures, cycled to gamma. Not 1 (identity
# calibration changes nothing), sharpening one position and flattening the next, so the confidence order moves.
STS_TEMPERATURES = (0.5, 2.0, 1.5)

# Paths: the value is a name under the temp dir the engine owns (`_case_path`), never a path the caller picks.
PATH_OPTIONS = frozenset({"SGLANG_DSPARK_STS_COLLECT_PATH", "SGLANG_DSPARK_BLOCK_ACCEPT_ESTIMATE_PATH", STS_PATH})

ENGINE_OPTIONS = (
    # Passive: observers behind DsparkStepObservers (dspark_observability.py), built with the worker; each reads
    # the step's tensors and keeps, logs or writes its own copies. They draw no randomness, so same_seed holds.
    # DsparkInfoDumper: the per-step record, kept in memory for dump_info_records; `all` is every component: the
    # GPU-time segments (step, draft, target verify) record `Event(enable_timing=True)` and `reqs` stages each row's
    # detail through a D2H `Stream(device=...)` into pinned memory, which torch.cpu does not take: they run on
    # `device_view.host_timed_observers` (host-clock events, unpinned staging; what that hides is listed there).
    EngineOption("SGLANG_DSPARK_DEBUG_DUMP", "passive", value="all", off=""),
    # The published SPS-profiling switch: an alias of DEBUG_DUMP's core and step_cpu_time components.
    EngineOption("SGLANG_DSPARK_ENABLE_SPS_RECORD", "passive"),
    # DsparkInfoDumper's predicted-SPS log every N steps (the SPS table's predicted step time against the measured
    # one); it adds the step_gpu_time component. Run in a ragged mode (RAGGED_OPTIONS): only a ragged budget predicts.
    EngineOption("SGLANG_DSPARK_LOG_SPS_PRED_INTERVAL", "passive", value="2"),
    # The settings in RAGGED_OPTIONS read the draft's confidence (or the ragged planner's schedule). In static
    # verify SGLang builds no confidence head (build_confidence_head returns None, models/dspark.py:488), so they
    # would return before reading anything: the pack runs them, on and off alike, in SGLang's cap-accept mode (its
    # metrics probe ignores compact mode, dspark_observability.py:692).
    # ConfidenceMetricsProbe.maybe_observe, read at each step: per-position confidence calibration, logged.
    EngineOption("SGLANG_DSPARK_DEBUG_CONFIDENCE_METRICS", "passive"),
    # StsDataRecorder: each step's raw confidence and correct-draft count, flushed to <stem>.* files.
    EngineOption("SGLANG_DSPARK_STS_COLLECT_PATH", "passive", value="sts", off=""),
    # BlockAcceptEstimateRecorder (dspark_block_accept_estimator.py): a JSONL of block-accept estimates, and an
    # online log of them every N steps; either one builds the recorder. It estimates what a trimmed block would have
    # accepted uncapped, from the rows the next steps verify (`_open_block`, `_settle_pending`): static verify trims
    # nothing, so both run in a ragged mode (RAGGED_OPTIONS).
    EngineOption("SGLANG_DSPARK_BLOCK_ACCEPT_ESTIMATE_PATH", "passive", value="block_accept.jsonl", off=""),
    EngineOption("SGLANG_DSPARK_BLOCK_ACCEPT_ONLINE_INTERVAL", "passive"),
    # DSparkVerifyPlanner._log_verify_lens_decision: a log of each ragged schedule (every planned step in cap-accept).
    EngineOption("SGLANG_DSPARK_DEBUG_CONFIDENCE_PREFIX_SCHEDULER", "passive"),
    # Output-preserving modes.
    # The ragged verify mode: compact packs each request's planned verify window (its confidence, the budget from the
    # case's SPS table and forced fraction) and verifies only those rows; the tokens kept are the ones static verify
    # keeps, so greedy outputs must match (the draws move with the schedule). Compact runs the cap-accept planner too.
    EngineOption(VERIFY_MODE, "output-preserving", value="compact", off="static", same_seed=False),
    # The draft's argmax for every row, sampled ones included, proposed as a one-hot law (environ.py: "lower
    # acceptance at high temperatures"): greedy rows draft the same tokens; sampled rows keep the target's law
    # through the accept but draw differently, so only greedy outputs must match.
    EngineOption("SGLANG_DSPARK_USE_GREEDY_DRAFT", "output-preserving", same_seed=False),
    # DSparkDraftProposer: the draft embeds its own input (forward_embed) or is handed the embedding, read each step.
    # Off, the proposer stages the embedding as input_embeds, and ModelRunner._extend_forward_kwargs casts it to
    # bfloat16 whatever the model's dtype (model_runner.py:1772): every eager draft step of a float16 or float32 model
    # raises. SGLang's bug, reachable with `--dtype float16` on a GPU (findings/sglang/
    # opt_001_input_embeds_cast_to_bf16.py); the step level's float32 models meet it on the first draft step.
    EngineOption("SGLANG_DSPARK_EMBED_IN_GRAPH", "output-preserving", value="0", off="1",
                 not_exercised="off (0), SGLang's eager runner casts the draft's staged input embedding to bfloat16 "
                               "(model_runner.py:1772) and the step level's float32 draft raises on it: a finding "
                               "(findings/sglang/opt_001_input_embeds_cast_to_bf16.py), not a ledger entry while "
                               "the option stays off"),
    # DSparkDraftModel._stacked_ctx_kv_params: every layer's KV projection as one weight, "exact: the input hidden
    # is shared" (models/dspark.py:800), or the per-layer projections; read at each context-KV projection.
    EngineOption("SGLANG_DSPARK_STACKED_CTX_KV", "output-preserving", value="0", off="1"),
    # The draft sampler folded into the captured draft graph (dspark_draft.py:462, dspark_worker_v2.py:607).
    EngineOption("SGLANG_DSPARK_FOLDED_PROPOSAL", "output-preserving", value="0", off="1", same_seed=False,
                 not_exercised="read only with a captured draft graph and its draft sampler (dspark_worker_v2.py:607, "
                               "dspark_draft.py:462): CUDA graphs do not run on the CPU"),
    # How many steps old the confidence a ragged budget reads is (HostConfidenceBudgetPlanner): moves the schedule.
    EngineOption("SGLANG_DSPARK_CONFIDENCE_RELAY_LAG_STEPS", "output-preserving", value="1", off="2", same_seed=False),
    # The static verify epilogue's fused greedy accept and bookkeeping, one kernel (static_accept_tail.py).
    EngineOption("SGLANG_DSPARK_FUSED_ACCEPT_TAIL", "output-preserving", not_exercised=_EPILOGUE),
    EngineOption("SGLANG_DSPARK_ACCEPT_TAIL_MIN_BS", "output-preserving", value="2", off="1",
                 not_exercised=_EPILOGUE + "; bounds FUSED_ACCEPT_TAIL's batch sizes"),
    EngineOption("SGLANG_DSPARK_ACCEPT_TAIL_MAX_BS", "output-preserving", value="4", off="0",
                 not_exercised=_EPILOGUE + "; bounds FUSED_ACCEPT_TAIL's batch sizes"),
    # The draft context-KV commit staged and written on a side stream by the next draft graph.
    EngineOption("SGLANG_DSPARK_DEFER_CONTEXT_KV", "output-preserving",
                 not_exercised=_EPILOGUE + ", and the DeepSeek-V4 attention backend (dspark_deferred_commit.py)"),
    # A second stream for the V4 draft's work: a schedule, not a value.
    EngineOption("SGLANG_DSPARK_ENABLE_MULTI_STREAM", "output-preserving", value="0", off="1", not_exercised=_V4_DRAFT),
    # The V4 draft's fast kernel for the same computation.
    EngineOption("SGLANG_DSPARK_FAST_KERNEL", "output-preserving", value="0", off="1", not_exercised=_V4_DRAFT),
    # The Markov head's vocab-sharded bias and its all-gather over NVLink or NCCL: the same values gathered.
    EngineOption("SGLANG_DSPARK_OPT_MARKOV_W2_TP_SHARD", "output-preserving", value="0", off="1",
                 not_exercised=_TP_VOCAB),
    EngineOption("SGLANG_DSPARK_NVLINK_VOCAB_GATHER", "output-preserving", value="0", off="1",
                 not_exercised=_TP_VOCAB + ", with an NVLink multicast plane"),
    # Server arguments. `--speculative-dspark-confidence-sts-path`: a per-position temperature calibration of the
    # draft's confidence, which the ragged planner schedules by ("losslessness is unaffected either way", spec.py;
    # DSparkVerifyPlanner.__init__ loads it onto the confidence head, dspark_planner.py:92, models/dspark.py:462).
    # The value names the calibration file the pack writes (STS_TEMPERATURES); it moves the schedule, so the draws.
    EngineOption(STS_PATH, "output-preserving", value="sts_calibration.json", off="", same_seed=False),
    # `--speculative-dspark-align-verify-tokens-to-graph-tier`: "when off the schedule is byte-for-byte unchanged".
    EngineOption(ALIGN_TO_TIER, "output-preserving", value="true", off="false", same_seed=False,
                 not_exercised="it fills the verify budget up to the captured ragged decode graph's token tier "
                               "(dspark_planner.py:490-524); the step level captures no graph "
                               "(ragged_capture_num_tokens is None), so SGLang returns the budget unchanged"),
)
# Not declared: they change outputs on purpose (the report lists them as unlisted).
UNDECLARED = {
    "SGLANG_DSPARK_SIMULATE_FOLD": "the simulated acceptance of SGLANG_SIMULATE_ACC_LEN in the folded epilogue: a "
                                   "benchmark mode",
    "SGLANG_DSPARK_FP32_LM_HEAD": "the V4 draft's LM head precision",
    "SGLANG_DSPARK_OPT_MARKOV_W2_BF16": "the V4 draft's Markov bias in bf16: a precision",
}

_BY_NAME = {o.name: o for o in ENGINE_OPTIONS}
# Read only in a ragged verify mode: where the draft carries a confidence head, where a block is trimmed (the
# block-accept estimate) or a budget predicted (the SPS log). Run in cap-accept mode, on and off alike.
RAGGED_OPTIONS = frozenset({"SGLANG_DSPARK_DEBUG_CONFIDENCE_METRICS", "SGLANG_DSPARK_STS_COLLECT_PATH",
                            "SGLANG_DSPARK_DEBUG_CONFIDENCE_PREFIX_SCHEDULER",
                            "SGLANG_DSPARK_CONFIDENCE_RELAY_LAG_STEPS", "SGLANG_DSPARK_BLOCK_ACCEPT_ESTIMATE_PATH",
                            "SGLANG_DSPARK_BLOCK_ACCEPT_ONLINE_INTERVAL", "SGLANG_DSPARK_LOG_SPS_PRED_INTERVAL",
                            STS_PATH})

# sglang-pd runs the same settings on its decode server, static verify only: the verify mode and the settings that
# need a ragged one run on `sglang` (a PD decode server's ragged relay is the relay level's subject, RELAY-002).
PD_ENGINE_OPTIONS = tuple(
    replace(o, not_exercised="run on engine sglang: sglang-pd's decode server runs static verify only, and this "
                             "setting needs a ragged verify mode") if o.name in RAGGED_OPTIONS | {VERIFY_MODE} else o
    for o in ENGINE_OPTIONS)


def option_names() -> tuple:
    """Every SGLANG_DSPARK_* setting in SGLang's own registry (`envs`' EnvField attributes), its verify mode and its
    DSpark server arguments (ServerArgs' `speculative_dspark_*` fields but those the case sets), sorted."""
    from sglang.srt.environ import EnvField, Envs
    from sglang.srt.server_args import ServerArgs

    settings = {n for n, v in vars(Envs).items() if (n.startswith(PREFIX) or n == VERIFY_MODE) and isinstance(v, EnvField)}
    args = {n for n in ServerArgs.__struct_fields__ if n.startswith(SERVER_ARG_PREFIX)}  # a msgspec Struct
    return tuple(sorted(settings | (args - set(CASE_SERVER_ARGS))))


def _field(name: str):
    from sglang.srt.environ import envs

    return getattr(envs, name)


def overrides(options) -> dict:
    """EngineSpec.options as {setting: value}, each declared, exercised here and parsed by SGLang's own field; a value
    SGLang would not parse (it warns and falls back to the default) is the caller's error, naming the field."""
    known = sorted(o.name for o in ENGINE_OPTIONS if not o.not_exercised)
    out = {}
    for name, value in options:
        opt = _BY_NAME.get(name)
        if opt is None or opt.not_exercised:
            why = f" ({opt.not_exercised})" if opt is not None else ""
            raise ValueError(f"options: {name!r} is not an option the SGLang step level turns on{why}; "
                             f"known: {', '.join(known)}")
        if not isinstance(value, str):
            raise ValueError(f"options: {name} takes a string value, got {value!r}")
        if name not in PATH_OPTIONS | SERVER_ARG_OPTIONS and value != "":
            try:
                _field(name).parse(value)
            except ValueError as e:
                raise ValueError(f"options: {name}={value!r} is not a value SGLang parses ({e})") from None
        if name in PATH_OPTIONS and (os.path.isabs(value) or ".." in value.split("/")):
            raise ValueError(f"options: {name} takes a name inside the engine's temp dir, got {value!r}")
        out[name] = value
    return out


def is_default(env: dict) -> bool:
    """Whether these settings are what an engine without options runs: each value SGLang's default (parsed as SGLang
    parses it) and the variable not set in this process."""
    for name, value in env.items():
        if name in SERVER_ARG_OPTIONS:
            if value != _BY_NAME[name].off:
                return False
            continue
        f = _field(name)
        if f.is_set():
            return False
        if f.parse(value) != f._resolve_default():
            return False
    return True


@contextlib.contextmanager
def settings_applied(values: dict):
    """Each setting through SGLang's own `EnvField.set`, restored after, also when the call raises (SGLang's
    `override` restores on a normal exit only, so a failing case would leak its option into the next engine)."""
    saved = [(f, f.name in os.environ, os.environ.get(f.name), f._set_to_none) for f in map(_field, values)]
    try:
        for name, value in values.items():
            _field(name).set(value)
        yield
    finally:
        for f, present, value, to_none in saved:
            if present:
                os.environ[f.name] = value
            else:
                os.environ.pop(f.name, None)
            f._set_to_none = to_none


class OptionEnv:
    """The settings and server arguments of one engine with options, and the temp dir it owns (removed when the
    engine is closed, or at exit); the files a server argument reads are written there first."""

    def __init__(self, env: dict, *, gamma: int = 1):
        self.tmpdir = tempfile.mkdtemp(prefix="dspark-sglang-options-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.tmpdir, True)
        resolved = {n: (os.path.join(self.tmpdir, v) if n in PATH_OPTIONS and v else v) for n, v in env.items()}
        self.values = {n: v for n, v in resolved.items() if n not in SERVER_ARG_OPTIONS}
        self.server_args = {n: _server_arg(n, v) for n, v in resolved.items() if n in SERVER_ARG_OPTIONS}
        if self.server_args.get(STS_PATH):
            _write_sts_calibration(self.server_args[STS_PATH], gamma)

    @contextlib.contextmanager
    def applied(self):
        from contracts.adapters.sglang.device_view import host_timed_observers

        with settings_applied(self.values), host_timed_observers():
            yield

    def close(self):
        self._cleanup()


def _server_arg(name: str, value: str):
    if name in PATH_OPTIONS:
        return value or None
    return value == "true"


def _write_sts_calibration(path: str, gamma: int) -> None:
    """The calibration file as SGLang's fitter writes it (DSparkStsCalibration's JSON), one temperature a position."""
    temperatures = [STS_TEMPERATURES[i % len(STS_TEMPERATURES)] for i in range(gamma)]
    with open(path, "w") as f:
        json.dump({"temperatures": temperatures, "dataset": "dspark-contracts"}, f)


_LIVE: list = [None]  # the one Scheduler with options alive: (slot, OptionEnv)


def option_slot(spec, build):
    """The Scheduler for an engine with options: None where the settings are SGLang's defaults (the caller's cached
    Scheduler is that engine); else a new one, `build(env)`, which closes the previous one."""
    env = overrides(spec.options)
    if RAGGED_OPTIONS & set(env):
        env.setdefault(VERIFY_MODE, "cap-accept")
    if is_default(env):
        return None
    close_live()
    opt_env = OptionEnv(env, gamma=spec.gamma)
    slot = build(opt_env)
    _LIVE[0] = (slot, opt_env)
    return slot


def close_live():
    live, _LIVE[0] = _LIVE[0], None
    if live is not None:
        slot, opt_env = live
        slot.owner = None
        slot.close()
        opt_env.close()
