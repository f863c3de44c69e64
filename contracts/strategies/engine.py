from __future__ import annotations

from functools import lru_cache

from hypothesis import strategies as st

from contracts.boundary.engine import BudgetCase, EngineSpec, LayoutCase, LoopCase, PlanCase, RequestSpec, ScheduleCase, SpsSpec

# Repeated values make ties (across positions and requests) common: the tie order is part of the contract.
confidence_values = st.sampled_from([0.0, 1e-7, 0.25, 0.5, 0.8, 0.9, 1.0]) | st.floats(0.0, 1.0)


# Strategies are built once per shape and reused: building and validating them costs more than drawing.
@lru_cache(maxsize=None)
def _fixed_lists(elements, n: int):
    return st.lists(elements, min_size=n, max_size=n).map(tuple)


@st.composite
def confidences(draw, *, max_bs=6, max_gamma=6):
    bs = draw(st.integers(1, max_bs), label="bs")
    gamma = draw(st.integers(1, max_gamma), label="gamma")
    return draw(_fixed_lists(_fixed_lists(confidence_values, gamma), bs), label="confidence")


_SPS_VALUES = st.sampled_from([0.5, 1.0, 2.0]) | st.floats(0.1, 10.0)
_SECONDS = st.floats(0.0, 1e-2)


@lru_cache(maxsize=None)
def _ints(lo: int, hi: int):
    return st.integers(lo, hi)


@lru_cache(maxsize=None)
def _len_lists(gamma: int):
    return st.lists(st.integers(1, gamma + 1), min_size=0, max_size=8)


@st.composite
def schedule_cases(draw) -> ScheduleCase:
    conf = draw(confidences())
    bs, gamma = len(conf), len(conf[0])
    budget = draw(_ints(0, bs * gamma + 2), label="budget")
    min_len = draw(st.sampled_from([1, 1, 0, 2]), label="min_verify_len")
    return ScheduleCase(conf, budget, min(min_len, gamma + 1))


@st.composite
def sps_specs(draw, *, max_tokens=64, kind=None) -> SpsSpec:
    kind = draw(st.sampled_from(["steps", "additive"]), label="sps_kind") if kind is None else kind
    if kind == "steps":
        probes = sorted(draw(st.sets(st.integers(1, max_tokens), min_size=1, max_size=6), label="probes"))
        values = draw(_fixed_lists(_SPS_VALUES, len(probes)), label="steps_per_sec")
        return SpsSpec("steps", tuple(probes), tuple(values))
    xs = sorted(draw(st.sets(st.integers(1, max_tokens), min_size=1, max_size=4), label="alpha_sizes"))
    ys = draw(_fixed_lists(_SECONDS, len(xs)), label="alpha_seconds")
    ms = sorted(draw(st.sets(st.integers(1, max_tokens), min_size=1, max_size=4), label="theta_tokens"))
    ts = draw(_fixed_lists(_SECONDS, len(ms)), label="theta_seconds")
    bias = draw(st.floats(1e-4, 1e-2), label="bias_seconds")
    return SpsSpec("additive", bias_seconds=bias, alpha_points=tuple(zip(xs, ys)), theta_points=tuple(zip(ms, ts)))


@st.composite
def budget_cases(draw, *, forced=None, flat=False) -> BudgetCase:
    conf = draw(confidences())
    if flat:
        value = draw(st.floats(0.1, 10.0), label="flat_value")
        n = draw(st.integers(1, 4), label="flat_probes")
        sps = draw(st.sampled_from([None, SpsSpec("steps", tuple(range(1, n + 1)), (value,) * n)]), label="sps")
    else:
        sps = draw(st.none() | sps_specs(), label="sps")
    frac = None
    if forced or (forced is None and draw(st.booleans(), label="forced")):
        frac = draw(st.sampled_from([0.25, 0.5, 1.0]) | st.floats(1e-3, 1.0), label="force_budget_frac")
    return BudgetCase(conf, sps, frac)


@st.composite
def plan_cases(draw) -> PlanCase:
    """Every planner configuration within the default budget: each mode, flat and profiled tables, forced fractions
    below 1, and captured graphs or none (drawn first, so shrinking keeps the configuration)."""
    mode = draw(st.sampled_from(["cap-accept", "compact", "static"]), label="verify_mode")
    sps = draw(st.sampled_from([None, SpsSpec("steps", (1, 4, 8, 16), (4.0, 3.0, 2.0, 1.0))]) | sps_specs(max_tokens=48),
               label="sps")
    frac = draw(st.sampled_from([None, 0.25, 0.5, 1.0]) | st.floats(1e-3, 1.0), label="force_budget_frac")
    capture = draw(st.sampled_from([None, (1, 2, 4, 8), (1, 3, 6)]), label="capture_bs")
    # Batches stay within every captured grid here (bs <= 6): past it SGLang drops the ragged layout by design
    # (ragged_layout_exceeds_captured_grid) and verifies all, which PLAN-010 would read as ignoring a forced
    # fraction; its profiler, the fraction's user, refuses to sweep past the captured graphs (dspark_sps_profiler).
    return PlanCase(draw(confidences(max_bs=6)), mode, sps, frac, capture)


@st.composite
def layout_cases(draw) -> LayoutCase:
    gamma = draw(st.integers(1, 7), label="gamma")
    lens = draw(_len_lists(gamma), label="verify_lens")
    pad = draw(st.integers(0, 6), label="pad_extra")
    padded = len(lens) + draw(st.integers(0, 4), label="pad_rows")
    return LayoutCase(tuple(lens), gamma, pad, padded)


# ---- step level -------------------------------------------------------------------

DRAFTERS = ("vanilla", "gated", "rnn", "oracle", "random")


@st.composite
def engine_specs(draw, *, verify_mode=None, overlap=None) -> EngineSpec:
    mode = draw(st.sampled_from(["static", "cap-accept", "compact"]), label="verify_mode") if verify_mode is None else verify_mode
    sps = draw(st.sampled_from([None, None, SpsSpec("steps", (1, 4, 8, 16), (4.0, 3.0, 2.0, 1.0))]) | sps_specs(max_tokens=32),
               label="sps")
    return EngineSpec(
        vocab_size=draw(st.sampled_from([5, 8]), label="vocab_size"),
        gamma=draw(st.integers(1, 8), label="gamma"),
        drafter=draw(st.sampled_from(DRAFTERS), label="drafter"),
        verify_mode=mode,
        force_budget_frac=draw(st.sampled_from([None, None, 0.25, 0.5, 1.0]), label="force_budget_frac"),
        sps=sps,
        min_verify_len=draw(st.sampled_from([1, 1, 0]), label="min_verify_len"),
        enable_overlap=draw(st.booleans(), label="enable_overlap") if overlap is None else overlap,
        sample_from_anchor=draw(st.booleans(), label="sample_from_anchor"),
        seed=draw(st.integers(0, 3), label="seed"),
        model_seed=draw(st.integers(0, 3), label="model_seed"),
        capture_bs=draw(st.sampled_from([None, (1, 2, 4, 8)]), label="capture_bs"),
    )


def _machine_spec_list() -> list:
    """Engine configurations for the state machine: every drafter x verify mode x overlap, with the other
    knobs rotated through their values; simplest first, so a failure shrinks towards plain settings."""
    from itertools import product

    fracs, tables = (None, 0.25, 0.5, 1.0), (None, SpsSpec("steps", (1, 4, 8, 16), (4.0, 3.0, 2.0, 1.0)),
                                              SpsSpec("additive", bias_seconds=1e-3, alpha_points=((1, 0.0), (8, 4e-3)),
                                                      theta_points=((1, 0.0), (32, 8e-3))))
    specs = []
    for i, (overlap, mode, drafter) in enumerate(product((False, True), ("static", "cap-accept", "compact"), DRAFTERS)):
        for j in range(2):
            k = 2 * i + j
            specs.append(EngineSpec(
                vocab_size=(5, 8)[k % 2], gamma=(1, 2, 4, 7, 3, 8, 5, 6)[k % 8], drafter=drafter, verify_mode=mode,
                force_budget_frac=fracs[(k // 2) % 4], sps=tables[k % 3], min_verify_len=(1, 0)[(k // 3) % 2],
                enable_overlap=overlap, sample_from_anchor=(k // 5) % 2 == 0, seed=k % 3, model_seed=k % 4,
                capture_bs=(None, (1, 2, 4, 8))[(k // 7) % 2]))
    return specs


MACHINE_SPECS = _machine_spec_list()


# Sampling settings, simplest first: (temperature, top_k, has_eos). Greedy = temperature 0 or top_k 1.
_PARAMS = ((0.0, 0, False), (0.0, 1, False), (1.0, 0, False), (0.7, 3, False), (0.0, 0, True), (1.0, 0, True),
           (0.0, 3, True), (0.7, 0, True), (1.0, 3, True), (0.0, 1, True))


def _decode_request(vocab_size: int, code: int, params: tuple, max_new: int, greedy):
    """Prompt (1..5 tokens) and EOS id from one integer: three choices per request keep a state machine's
    shrinking cheap, and code 0 shrinks to the prompt (0,)."""
    n, rest = 1 + code % 5, code // 5
    prompt = []
    for _ in range(n):
        rest, tok = divmod(rest, vocab_size)
        prompt.append(tok)
    temperature, top_k, has_eos = params
    if greedy is not None and greedy != (temperature == 0 or top_k == 1):
        temperature, top_k = (0.0, top_k) if greedy else (1.0, 0)
    eos = (code // 3) % vocab_size if has_eos else None
    return tuple(prompt), temperature, max_new, eos, top_k


def _request_shapes(vocab_size: int, greedy=None):
    return st.tuples(st.integers(0, 10 ** 6), st.sampled_from(_PARAMS), st.integers(1, 10)).map(
        lambda t: _decode_request(vocab_size, *t, greedy))


_SHAPES: dict = {}


def request_shapes(vocab_size: int, greedy=None):
    """(prompt, temperature, max_new_tokens, eos_id, top_k) tuples; one strategy object per vocabulary, because
    building and validating strategies dominates a state machine's cost."""
    key = (vocab_size, greedy)
    if key not in _SHAPES:
        _SHAPES[key] = _request_shapes(vocab_size, greedy)
    return _SHAPES[key]


def request_specs(rid: int, vocab_size: int, *, greedy=None):
    """A request: prompt 1..5 tokens, greedy or sampled (T 0.7/1.0, top-k 0/1/3), max_new_tokens 1..10, maybe an EOS."""
    return request_shapes(vocab_size, greedy).map(lambda t: RequestSpec(rid, *t))


def _modes_for(engine, verify_mode=None, *, requests: bool = False):
    """The verify mode to draw for an engine: as asked, else static only where it draws no ragged mode
    (contracts.step_modes: step.ragged, and request.ragged for a whole-request contract), else any."""
    from contracts.step_modes import draws_ragged

    if verify_mode is None and engine is not None and not draws_ragged(engine, requests=requests):
        return "static"
    return verify_mode


@st.composite
def loop_cases(draw, *, verify_mode=None, max_requests=3, engine=None) -> LoopCase:
    """An engine configuration (one the engine runs, where given) and 1..max_requests requests."""
    spec = draw(engine_specs(verify_mode=_modes_for(engine, verify_mode)), label="spec")
    n = draw(st.integers(1, max_requests), label="n_requests")
    return LoopCase(spec, tuple(draw(request_specs(i, spec.vocab_size), label=f"request {i}") for i in range(n)))


# (temperature, top_k, top_p) of sampled requests: the target law changes with each knob.
SAMPLED_SETTINGS = ((1.0, 0, 1.0), (0.5, 0, 1.0), (1.5, 2, 1.0), (1.0, 0, 0.8), (0.8, 3, 0.9))


@st.composite
def law_cases(draw, max_requests=3, *, engine=None) -> LoopCase:
    """Sampled requests only, each with its own temperature / top-k / top-p, on any engine configuration the engine
    runs (static verify only without step.ragged)."""
    spec = draw(engine_specs(verify_mode=_modes_for(engine)), label="spec")
    reqs = []
    for i in range(draw(st.integers(1, max_requests), label="n_requests")):
        prompt = draw(st.lists(st.integers(0, spec.vocab_size - 1), min_size=1, max_size=4), label=f"prompt {i}")
        t, k, p = draw(st.sampled_from(SAMPLED_SETTINGS), label=f"settings {i}")
        reqs.append(RequestSpec(i, tuple(prompt), t, draw(st.integers(2, 8), label=f"max_new {i}"), None, k, p))
    return LoopCase(spec, tuple(reqs))
