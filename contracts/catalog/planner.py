"""Verify-budget and verify-length planner contracts (SGLang 0.5.23 contracts F1-F6, G1-G3, G6).

The planner decides how many draft tokens each request verifies. It may only
spend its budget, must keep each request's picks a prefix of its block (the
predictability that keeps the adaptive verify lossless), and must not shrink
anyone's window when given more budget.

Oracles are enumerations over the candidate cells in float64, from the
confidence alone. An engine may compute survival (the running product of
confidence) in a lower precision, so cells whose float64 values lie within
`REL_TOL` of each other, or of eps, may fall either way; exact ties follow the
stated order (value desc, position asc, request asc).
"""

from __future__ import annotations

import math
from fractions import Fraction

import hypothesis
import torch

from contracts import oracle
from contracts.boundary.engine import FLAT_SPS, SURVIVAL_EPS, BudgetCase, PlanCase, ScheduleCase, SpsSpec
from contracts.checks import expect, expect_equal
from contracts.protocol import PLANNER, PLANNER_EMPTY_BATCH, PLANNER_MIN_VERIFY_LEN
from contracts.registry import contract
from contracts.strategies.engine import budget_cases, layout_cases, plan_cases, schedule_cases, sps_specs

EXAMPLES = 50  # drawing a confidence matrix costs Hypothesis ~40 choices; 50 cases keep each contract near a second
REL_TOL = 1e-6  # float32 survival (SGLang) differs from float64 by ~1e-7 relative

# Ties everywhere: equal survival across positions (confidence 1) and across requests.
SEED_TIES = ScheduleCase(((1.0, 1.0, 0.5), (1.0, 1.0, 0.5)), budget=3)
# Three requests tied cell for cell: a tie order that changes with the budget takes a pick away from request 0
# between budgets 4 and 5.
THREE_WAY_TIES = ScheduleCase(((1.0, 1.0),) * 3, budget=4)
# SGLang 0.5.23's verify-all cache (compact mode, flat table) ignored a forced fraction: budget 0, L = 2.
FORCED_FLAT_COMPACT = PlanCase(((0.0,),), "compact", None, 0.25)


def _survival(confidence) -> list:
    """[bs][gamma] running products, float64."""
    return [oracle.survival(row) for row in confidence]


def _near(a: float, b: float) -> bool:
    return abs(a - b) <= REL_TOL * max(abs(a), abs(b))


def _cells(surv, eps: float):
    """(value, position, request) of the surely valid cells, and of the cells within tolerance of eps."""
    sure, edge = [], []
    for r, row in enumerate(surv):
        for k, v in enumerate(row):
            if _near(v, eps):
                edge.append((v, k, r))
            elif v >= eps:
                sure.append((v, k, r))
    return sure, edge


def _valid_per_row(confidence, eps: float) -> list:
    """Per request, how many of its cells are surely valid (survival >= eps, not within tolerance of it)."""
    sure, _ = _cells(_survival(confidence), eps)
    return [sum(1 for _, _, r in sure if r == row) for row in range(len(confidence))]


def _require(engine, min_verify_len: int = 1, bs: int = 1) -> None:
    if min_verify_len != 1 and PLANNER_MIN_VERIFY_LEN not in engine.capabilities:
        hypothesis.reject()  # an engine that fixes min_verify_len = 1 gets only such cases
    if bs == 0 and PLANNER_EMPTY_BATCH not in engine.capabilities:
        hypothesis.reject()


def _schedule(engine, case: ScheduleCase, budget=None):
    _require(engine, case.min_verify_len)
    conf = torch.tensor(case.confidence, dtype=torch.float64)
    return engine.schedule_verify_lens(conf, case.budget if budget is None else budget, case.min_verify_len, case.eps)


def _picks(case: ScheduleCase, lens, selected):
    """Per row, the picked cells: the engine's mask, or (min_verify_len = 1) the prefix its lengths imply."""
    if selected is not None:
        return [[bool(x) for x in row] for row in selected.tolist()]
    return [[k < n - 1 for k in range(case.gamma)] for n in lens]


@contract("PLAN-001", "schedule_verify_lens: every L lies in [max(min,1), gamma+1] and sum(L - max(min,1)) <= budget",
          requires={PLANNER}, cases=schedule_cases, examples=(SEED_TIES,), max_examples=EXAMPLES)
def lens_within_budget(engine, case):
    lens, _ = _schedule(engine, case)
    floor = max(case.min_verify_len, 1)
    expect(all(floor <= n <= case.gamma + 1 for n in lens), "verify_lens range", f"[{floor}, {case.gamma + 1}]", lens)
    expect(sum(n - floor for n in lens) <= case.budget, "sum(L - max(min,1))", f"<= budget {case.budget}", lens)


@contract("PLAN-002", "the picked cells are the top-budget valid cells by (value desc, position asc, request asc), "
          "so each row's picks form a prefix, and L = clamp(min + picks)",
          requires={PLANNER}, cases=schedule_cases, examples=(SEED_TIES,), max_examples=EXAMPLES)
def picks_are_ranked_prefixes(engine, case):
    lens, selected = _schedule(engine, case)
    picks = _picks(case, lens, selected)
    surv = _survival(case.confidence)
    sure, edge = _cells(surv, case.eps)
    picked = {(k, r) for r, row in enumerate(picks) for k, p in enumerate(row) if p}
    lo, hi = min(case.budget, len(sure)), min(case.budget, len(sure) + len(edge))
    expect(lo <= len(picked) <= hi, "number of picked cells", f"min(budget, #valid) in [{lo}, {hi}]", len(picked))
    allowed = {(k, r) for _, k, r in sure + edge}
    stray = sorted(picked - allowed)
    expect(not stray, "picked cells", f"valid cells (survival >= eps={case.eps})", f"invalid cells {stray}")
    key = {(k, r): (v, k, r) for v, k, r in sure + edge}
    for cell in picked:  # nothing left out ranks above a picked cell, beyond float tolerance
        v, k, r = key[cell]
        for u in sure:
            if (u[1], u[2]) in picked:
                continue
            better = u[0] > v and not _near(u[0], v) or (u[0] == v and (u[1], u[2]) < (k, r))
            expect(not better, f"pick (request {r}, position {k}, value {v:.6g})",
                   "ranked at least as high as every cell left out",
                   f"request {u[2]} position {u[1]} (value {u[0]:.6g}) was left out")
    for r, row in enumerate(picks):
        n = sum(row)
        expect(all(row[:n]), f"row {r} picks", "a prefix of the block", row)
        want = min(max(case.min_verify_len + n, max(case.min_verify_len, 1)), case.gamma + 1)
        expect_equal(f"verify_lens[{r}]", want, lens[r])


@contract("PLAN-003", "raising the budget never lowers any request's verify length",
          requires={PLANNER}, cases=schedule_cases, examples=(SEED_TIES, THREE_WAY_TIES), max_examples=EXAMPLES)
def monotone_in_budget(engine, case):
    before, _ = _schedule(engine, case)
    for extra in (1, 2, case.gamma * len(case.confidence)):
        after, _ = _schedule(engine, case, case.budget + extra)
        expect(all(a >= b for a, b in zip(after, before)), f"verify_lens at budget {case.budget}+{extra}",
               f">= {before} elementwise", after)


def _lookup(sps: SpsSpec, tokens: int) -> float:
    below = [v for p, v in zip(sps.probes, sps.values) if p <= tokens]
    return below[-1] if below else sps.values[0]


def _interp(points, x):
    """Piecewise-linear through the points, flat outside them."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = max(j for j in range(len(xs)) if xs[j] <= x)
    return ys[i] + (ys[i + 1] - ys[i]) * (x - xs[i]) / (xs[i + 1] - xs[i])


def _flat(sps) -> bool:
    """A cost table with one steps/s value: every extra token raises tau at the same rate, so it buys verify-all."""
    return sps is None or (sps.kind == "steps" and len(set(sps.values)) == 1)


def _theta(sps: SpsSpec, bs: int, b: int, tau: float) -> float:
    if sps.kind == "additive":
        return tau / (sps.bias_seconds + _interp(sps.alpha_points, bs) + _interp(sps.theta_points, bs + b))
    return tau * _lookup(sps, bs + b)


def _budget(engine, case: BudgetCase) -> int:
    conf = torch.tensor(case.confidence, dtype=torch.float64)
    return engine.verify_token_budget(conf, case.sps, case.force_budget_frac, case.eps)


@contract("PLAN-004", "the budget is the first maximiser of tau(b)*SPS(bs+b) over 0..#valid cells (<= bs*gamma), "
          "tau(b) = bs + the b largest survivals", requires={PLANNER}, cases=lambda: budget_cases(forced=False),
          max_examples=EXAMPLES)
def budget_maximises_throughput(engine, case: BudgetCase):
    budget = _budget(engine, case)
    sure, edge = _cells(_survival(case.confidence), case.eps)
    bs = len(case.confidence)
    n_max = len(sure) + len(edge)
    expect(0 <= budget <= n_max <= bs * len(case.confidence[0]), "budget", f"in [0, {n_max}]", budget)
    sps = FLAT_SPS if case.sps is None else case.sps
    values = sorted((v for v, _, _ in sure + edge), reverse=True)
    tau, thetas = float(bs), [_theta(sps, bs, 0, float(bs))]
    for b, v in enumerate(values, start=1):
        tau += v
        thetas.append(_theta(sps, bs, b, tau))
    best = max(thetas)
    first = min(b for b, t in enumerate(thetas) if _near(t, best) or t >= best)
    ok = budget < len(thetas) and (_near(thetas[budget], best) or thetas[budget] >= best) and \
        all(not (t > thetas[budget] and not _near(t, thetas[budget])) for t in thetas[:budget])
    expect(ok, "budget (first argmax of throughput)", first,
           f"{budget} (throughput {thetas[budget] if budget < len(thetas) else 'n/a'} vs best {best})")


def _forced(frac: float, cells: int) -> set:
    """floor(f * cells), allowing for the rounding of the product in float arithmetic (in any order)."""
    exact = Fraction(frac) * cells
    return {math.floor(exact * (1 + d)) for d in (Fraction(-4, 2 ** 52), 0, Fraction(4, 2 ** 52))}


@contract("PLAN-005", "with dspark_force_budget_frac f in (0,1] the budget is floor(f*bs*gamma) (up to float rounding "
          "of the product), whatever the cost table", requires={PLANNER}, cases=lambda: budget_cases(forced=True),
          max_examples=EXAMPLES)
def forced_fraction(engine, case: BudgetCase):
    bs, gamma = len(case.confidence), len(case.confidence[0])
    budget = _budget(engine, case)
    want = _forced(case.force_budget_frac, bs * gamma)
    expect(budget in want, f"budget at frac {case.force_budget_frac} of {bs}x{gamma} cells", sorted(want), budget)


@contract("PLAN-006", "a flat cost table gives verify-all: the budget covers every valid cell and every valid cell is verified",
          requires={PLANNER}, cases=lambda: budget_cases(forced=False, flat=True), max_examples=EXAMPLES)
def flat_table_verifies_all(engine, case: BudgetCase):
    sure, edge = _cells(_survival(case.confidence), case.eps)
    budget = _budget(engine, case)
    expect(len(sure) <= budget <= len(sure) + len(edge), "budget (flat table)", f"#valid = {len(sure)}", budget)
    lens, _ = _schedule(engine, ScheduleCase(case.confidence, budget, 1, case.eps))
    for r, valid in enumerate(_valid_per_row(case.confidence, case.eps)):
        expect(lens[r] >= 1 + valid, f"verify_lens[{r}] (flat table)", f">= 1 + {valid} valid cells", lens[r])


@contract("PLAN-007", "an SPS table needs strictly increasing probes and looks up the largest probe <= tokens (the first below range)",
          requires={PLANNER}, cases=lambda: sps_specs(kind="steps"))
def sps_table_lookup(engine, sps: SpsSpec):
    top = sps.probes[-1] + 2
    for tokens in range(0, top + 1):
        expect_equal(f"SPS({tokens}) for probes {list(sps.probes)}", _lookup(sps, tokens), engine.sps_lookup(sps, tokens))
    if len(sps.probes) > 1:
        bad = SpsSpec("steps", tuple(reversed(sps.probes)), sps.values)
        dup = SpsSpec("steps", (sps.probes[0],) + sps.probes[:-1], sps.values)
        for table in (bad, dup):
            try:
                engine.new_sps_table(table)
            except ValueError as e:
                expect("sample_batch_tokens" in str(e), "error names the field", "sample_batch_tokens", str(e))
            else:
                expect(False, f"new_sps_table(probes={list(table.probes)})", "ValueError", "accepted")


@contract("PLAN-008", "the compact layout: qo_indptr = [0, cumsum L]; padding rows are invalid; pack -> scatter "
          "returns exactly the verified cells and the fill elsewhere",
          requires={PLANNER}, cases=layout_cases)
def compact_round_trip(engine, case):
    _require(engine, bs=len(case.verify_lens))
    T, bs = case.gamma + 1, len(case.verify_lens)
    total = sum(case.verify_lens)
    cand = torch.arange(1, bs * T + 1, dtype=torch.int64).reshape(bs, T)
    view = engine.compact_layout(list(case.verify_lens), T, total + case.pad_extra, cand, -7)
    indptr = [0]
    for n in case.verify_lens:
        indptr.append(indptr[-1] + n)
    expect_equal("qo_indptr", indptr, view.qo_indptr)
    expect_equal("valid", [True] * total + [False] * case.pad_extra, view.valid)
    expect_equal("padding req_id", [bs] * case.pad_extra, view.req_id[total:])
    expect_equal("padding ids", [0] * case.pad_extra, view.packed[total:].tolist())
    expected = torch.full((bs, T), -7, dtype=torch.int64)
    for r, n in enumerate(case.verify_lens):
        expected[r, :n] = cand[r, :n]
    expect_equal("scatter(pack(candidates))", expected, view.scattered)


@contract("PLAN-009", "padding verify lengths to a captured graph fills the bucket exactly: real rows kept, the leftover spread "
          "base+(i<rem) over pad rows, or onto the last real row when there are none",
          requires={PLANNER}, cases=layout_cases)
def pad_to_bucket(engine, case):
    lens, bs = list(case.verify_lens), len(case.verify_lens)
    _require(engine, bs=bs)
    tokens = sum(lens) + case.pad_extra
    if bs == 0 and case.padded_bs == 0:
        return
    out = list(engine.pad_verify_lens_to_graph(lens, tokens, case.padded_bs))
    expect_equal("sum(padded lens)", tokens, sum(out))
    expect_equal("padded rows", case.padded_bs, len(out))
    if case.padded_bs == bs:
        expect_equal("padded lens", lens[:-1] + [lens[-1] + case.pad_extra], out)
        return
    expect_equal("real rows' lens", lens, out[:bs])
    # Spread evenly, extras first: non-negative, within one of each other, non-increasing. With the sum above
    # these leave exactly one answer, base + (i < rem), stated here as properties rather than recomputed.
    pads = out[bs:]
    expect(min(pads) >= 0 and max(pads) - min(pads) <= 1 and pads == sorted(pads, reverse=True),
           f"pad rows' lens (leftover {case.pad_extra} over {len(pads)} rows)",
           "non-negative, within one of each other, the larger ones first", pads)


@contract("PLAN-010", "one planner step: static mode sets no layout; otherwise every L is in [1, gamma+1], qo_indptr = "
          "[0, cumsum L], the layout spends at most the budget it resolved (sum(L-1) <= budget; a forced fraction "
          "binds whatever the table, a flat table without one verifies every valid cell), and a compact layout's "
          "token tier is a captured tier >= sum(L)", requires={PLANNER}, cases=plan_cases, max_examples=EXAMPLES,
          examples=(FORCED_FLAT_COMPACT,))
def planner_step(engine, case):
    view = engine.plan_layout(case)
    gamma, bs = case.gamma, len(case.confidence)
    if case.verify_mode == "static":
        expect(view.verify_lens is None, "static layout", "none (verify all gamma+1)", view.verify_lens)
        return
    # No layout means every request verifies its whole block: the same budget checks hold for that.
    lens = [gamma + 1] * bs if view.verify_lens is None else list(view.verify_lens)
    expect(len(lens) == bs and all(1 <= n <= gamma + 1 for n in lens), "verify_lens", f"{bs} lengths in [1, {gamma + 1}]",
           lens)
    indptr = [0]
    for n in lens:
        indptr.append(indptr[-1] + n)
    if view.qo_indptr is not None:
        expect_equal("qo_indptr", indptr, list(view.qo_indptr)[: bs + 1])
    spent = sum(n - 1 for n in lens)
    if case.force_budget_frac is not None:
        cap = max(_forced(case.force_budget_frac, bs * gamma))
        expect(spent <= cap, f"sum(L - 1) with forced fraction {case.force_budget_frac} (budget {view.budget})",
               f"<= floor(f*bs*gamma) = {cap}", f"{spent} (verify_lens {lens})")
    elif _flat(case.sps):
        for r, valid in enumerate(_valid_per_row(case.confidence, SURVIVAL_EPS)):
            expect(lens[r] >= 1 + valid, f"verify_lens[{r}] (flat table)", f">= 1 + {valid} valid cells", lens[r])
    elif view.budget is not None:
        expect(spent <= view.budget, "sum(L - 1)", f"<= the resolved budget {view.budget}", f"{spent} ({lens})")
    if case.verify_mode == "compact" and case.capture_bs is not None and view.graph_num_tokens is not None:
        tiers = sorted({b * (gamma + 1) for b in case.capture_bs})
        expect(view.graph_num_tokens in tiers and view.graph_num_tokens >= sum(lens), "compact token tier",
               f"a captured tier of {tiers} >= sum(L) = {sum(lens)}", view.graph_num_tokens)
