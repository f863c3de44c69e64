"""Verify-budget and verify-length planner contracts (SGLang 0.5.23 contracts F1-F6, G1-G3, G6).

The planner decides how many draft tokens each request verifies. It may only
spend its budget, must keep each request's picks a prefix of its block (the
predictability that keeps the adaptive verify lossless), and must not shrink
anyone's window when given more budget.
"""

from __future__ import annotations

import math

import torch

from contracts.boundary.engine import FLAT_SPS, BudgetCase, ScheduleCase, SpsSpec
from contracts.checks import expect, expect_equal
from contracts.protocol import PLANNER
from contracts.registry import contract
from contracts.strategies.engine import budget_cases, layout_cases, schedule_cases, sps_specs

EXAMPLES = 50  # drawing a confidence matrix costs Hypothesis ~40 choices; 50 cases keep each contract near a second

# Ties everywhere: equal survival across positions (confidence 1) and across requests.
SEED_TIES = ScheduleCase(((1.0, 1.0, 0.5), (1.0, 1.0, 0.5)), budget=3)


def _survival(engine, case: ScheduleCase) -> torch.Tensor:
    return engine.survival(torch.tensor(case.confidence, dtype=torch.float64))


def _ranked_cells(surv: torch.Tensor, eps: float):
    """Valid cells in the scheduling order: value desc, position asc, request asc (the oracle)."""
    bs, gamma = surv.shape
    cells = [(float(surv[r, k]), k, r) for r in range(bs) for k in range(gamma) if float(surv[r, k]) >= eps]
    return sorted(cells, key=lambda c: (-c[0], c[1], c[2]))


@contract("PLAN-001", "schedule_verify_lens: every L lies in [max(min,1), gamma+1] and sum(L - max(min,1)) <= budget",
          requires={PLANNER}, cases=schedule_cases, examples=(SEED_TIES,), max_examples=EXAMPLES)
def lens_within_budget(engine, case):
    lens, _ = engine.schedule_verify_lens(_survival(engine, case), case.budget, case.min_verify_len, case.eps)
    floor = max(case.min_verify_len, 1)
    expect(all(floor <= n <= case.gamma + 1 for n in lens), "verify_lens range", f"[{floor}, {case.gamma + 1}]", lens)
    expect(sum(n - floor for n in lens) <= case.budget, "sum(L - max(min,1))", f"<= budget {case.budget}", lens)


@contract("PLAN-002", "the picked cells are the top-budget valid cells by (value desc, position asc, request asc), "
          "so each row's picks form a prefix, and L = clamp(min + picks)",
          requires={PLANNER}, cases=schedule_cases, examples=(SEED_TIES,), max_examples=EXAMPLES)
def picks_are_ranked_prefixes(engine, case):
    surv = _survival(engine, case)
    lens, selected = engine.schedule_verify_lens(surv, case.budget, case.min_verify_len, case.eps)
    bs, gamma = surv.shape
    expected = torch.zeros(bs, gamma, dtype=torch.bool)
    for _, k, r in _ranked_cells(surv, case.eps)[: case.budget]:
        expected[r, k] = True
    expect_equal("selected cells", expected, selected.to(torch.bool))
    for r in range(bs):
        picks = int(selected[r].sum())
        expect(bool(selected[r, :picks].all()), f"row {r} picks", "a prefix of the block", selected[r].tolist())
        want = min(max(case.min_verify_len + picks, max(case.min_verify_len, 1)), gamma + 1)
        expect_equal(f"verify_lens[{r}]", want, lens[r])


@contract("PLAN-003", "raising the budget never lowers any request's verify length",
          requires={PLANNER}, cases=schedule_cases, examples=(SEED_TIES,), max_examples=EXAMPLES)
def monotone_in_budget(engine, case):
    surv = _survival(engine, case)
    before, _ = engine.schedule_verify_lens(surv, case.budget, case.min_verify_len, case.eps)
    for extra in (1, 2, surv.numel()):
        after, _ = engine.schedule_verify_lens(surv, case.budget + extra, case.min_verify_len, case.eps)
        expect(all(a >= b for a, b in zip(after, before)), f"verify_lens at budget {case.budget}+{extra}",
               f">= {before} elementwise", after)


def _lookup(sps: SpsSpec, tokens: int) -> float:
    below = [v for p, v in zip(sps.probes, sps.values) if p <= tokens]
    return below[-1] if below else sps.values[0]


def _interp(points, x):
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def _theta(sps: SpsSpec, bs: int, b: int, tau: float) -> float:
    if sps.kind == "additive":
        return tau / (sps.bias_seconds + _interp(sps.alpha_points, bs) + _interp(sps.theta_points, bs + b))
    return tau * _lookup(sps, bs + b)


@contract("PLAN-004", "the budget is the first maximiser of tau(b)*SPS(bs+b) over 0..#valid cells (<= bs*gamma)",
          requires={PLANNER}, cases=lambda: budget_cases(forced=False), max_examples=EXAMPLES)
def budget_maximises_throughput(engine, case: BudgetCase):
    surv = torch.tensor(case.survival, dtype=torch.float64)
    bs, gamma = surv.shape
    budget = engine.verify_token_budget(surv, case.sps, None, case.eps)
    values = sorted((v for v in surv.reshape(-1).tolist() if v >= case.eps), reverse=True)
    expect(0 <= budget <= len(values) <= bs * gamma, "budget", f"in [0, {len(values)}]", budget)
    sps = FLAT_SPS if case.sps is None else case.sps
    tau, thetas = float(bs), [_theta(sps, bs, 0, float(bs))]
    for b, v in enumerate(values, start=1):
        tau += v
        thetas.append(_theta(sps, bs, b, tau))
    best = max(range(len(thetas)), key=lambda b: (thetas[b], -b))
    expect_equal("budget (first argmax of throughput)", best, budget)


@contract("PLAN-005", "with dspark_force_budget_frac f in (0,1] the budget is floor(f*bs*gamma), whatever the cost table",
          requires={PLANNER}, cases=lambda: budget_cases(forced=True), max_examples=EXAMPLES)
def forced_fraction(engine, case: BudgetCase):
    surv = torch.tensor(case.survival, dtype=torch.float64)
    bs, gamma = surv.shape
    budget = engine.verify_token_budget(surv, case.sps, case.force_budget_frac, case.eps)
    expect_equal(f"budget at frac {case.force_budget_frac}", math.floor(case.force_budget_frac * bs * gamma), budget)


@contract("PLAN-006", "a flat cost table gives verify-all: the budget covers every valid cell and every valid cell is verified",
          requires={PLANNER}, cases=lambda: budget_cases(forced=False, flat=True), max_examples=EXAMPLES)
def flat_table_verifies_all(engine, case: BudgetCase):
    surv = torch.tensor(case.survival, dtype=torch.float64)
    valid = surv >= case.eps
    budget = engine.verify_token_budget(surv, case.sps, None, case.eps)
    expect_equal("budget (flat table)", int(valid.sum()), budget)
    lens, _ = engine.schedule_verify_lens(surv, budget, 1, case.eps)
    expect_equal("verify_lens (flat table)", (1 + valid.sum(dim=1)).tolist(), lens)


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


@contract("PLAN-009", "pad_verify_lens_to_bucket fills the bucket exactly: real rows kept, the leftover spread "
          "base+(i<rem) over pad rows, or onto the last real row when there are none",
          requires={PLANNER}, cases=layout_cases)
def pad_to_bucket(engine, case):
    lens, bs = list(case.verify_lens), len(case.verify_lens)
    tokens = sum(lens) + case.pad_extra
    if bs == 0 and case.padded_bs == 0:
        return
    out = engine.pad_verify_lens_to_bucket(lens, tokens, case.padded_bs)
    expect_equal("sum(padded lens)", tokens, sum(out))
    n_pad = case.padded_bs - bs
    if n_pad:
        base, rem = divmod(case.pad_extra, n_pad)
        expect_equal("padded lens", lens + [base + (i < rem) for i in range(n_pad)], out)
    else:
        expect_equal("padded lens", lens[:-1] + [lens[-1] + case.pad_extra], out)
