"""KV reservation and ownership in the decode step (SGLang 0.5.23 contract E1, and the row headroom).

Each decode step reserves KV for the verify window before the previous step's
result is processed (overlap scheduling), so it must reserve the window twice
over: allocated >= committed + 2T, in whole pages. The request-to-token row must
hold that reservation for every request the engine admitted, at every page size
it runs; the slots must be the request's own; and the allocated length has one
writer per step.
"""

from __future__ import annotations

import hypothesis

from contracts.boundary.kv import KvCase
from contracts.checks import expect, expect_equal
from contracts.protocol import KV
from contracts.registry import contract
from contracts.strategies.kv import bind, kv_plans

EDGE = kv_plans  # requests at the engine's admission limit are drawn on purpose (the edge where a row runs out)


def _steps(engine, plan):
    pages = tuple(engine.kv_page_sizes())
    page = pages[plan.page_choice % len(pages)]
    case = bind(plan, engine.kv_admission_limit(plan.context_len, plan.gamma + 1, page), page,
                engine.kv_prompt_limit(plan.context_len))
    if case is None:
        hypothesis.reject()  # the engine admits no such request at this context length and page size
    return case, engine.run_kv_steps(case)


def _reserved(case: KvCase, steps):
    """Every reservation's per-request view, failing on a reservation that raised or a step not reported."""
    steps = list(steps)
    for s, step in enumerate(steps):
        expect(step.error is None, f"step {s} reservation", "no exception (the request was admitted)", step.error)
        expect_equal(f"step {s} requests", len(case.requests), len(step.requests))
        yield s, step
    expect_equal("decode steps reported", len(case.commits), len(steps))


def _ceil(n: int, page: int) -> int:
    return -(-n // page) * page


@contract("KV-001", "each decode step reserves the verify window twice over (overlap): allocated >= ceil_page(committed "
          "+ 2T), in whole pages, never below what the request held", requires={KV}, cases=EDGE)
def reserve_covers_double_window(engine, plan):
    case, steps = _steps(engine, plan)
    T, page = case.num_draft_tokens, case.page_size
    for s, step in _reserved(case, steps):
        for i, r in enumerate(step.requests):
            where = f"step {s} request {i} (committed {r.committed}, T {T}, page {page})"
            expect(r.allocated_after >= _ceil(r.committed + 2 * T, page), f"{where}: allocated",
                   f">= {_ceil(r.committed + 2 * T, page)}", r.allocated_after)
            expect(r.allocated_after % page == 0, f"{where}: allocated", f"a multiple of page size {page}", r.allocated_after)
            expect(r.allocated_after >= r.allocated_before, f"{where}: allocated", f">= {r.allocated_before} (never shrinks)",
                   r.allocated_after)


@contract("KV-002", "the request-to-token row of every admitted request holds what the step reserved, at every page size "
          "(allocated <= row width, near the context limit too), and no row outside the batch changes",
          requires={KV}, cases=EDGE)
def row_holds_the_reservation(engine, plan):
    case, steps = _steps(engine, plan)
    for s, step in _reserved(case, steps):
        for i, r in enumerate(step.requests):
            expect(r.allocated_after <= r.row_width,
                   f"step {s} request {i} row (prompt {case.requests[i].prompt_len} + {case.requests[i].max_new_tokens} new, "
                   f"context {case.context_len}, T {case.num_draft_tokens}, page {case.page_size})",
                   f"width >= allocated {r.allocated_after}", f"width {r.row_width}")
        expect(not step.other_rows_changed, f"step {s}: rows outside the batch", "unchanged", "changed")


@contract("KV-003", "the allocator is asked for exactly each row's growth, and the row's slots are the "
          "request's own: distinct across the batch, never the padding slot 0, earlier positions unchanged; "
          "the slots drawn are at most the growth asked for", requires={KV}, cases=EDGE)
def slots_are_owned(engine, plan):
    case, steps = _steps(engine, plan)
    previous = [None] * len(case.requests)
    for s, step in _reserved(case, steps):
        expect_equal(f"step {s} allocator asks (from, to)", [(r.allocated_before, r.allocated_after) for r in step.requests],
                     [tuple(a) for a in step.asked])
        growth = sum(r.allocated_after - r.allocated_before for r in step.requests)
        expect(step.drawn <= growth, f"step {s} slots drawn", f"<= the growth asked for ({growth})", step.drawn)
        seen = {}
        for i, r in enumerate(step.requests):
            expect_equal(f"step {s} request {i} row slots", min(r.allocated_after, r.row_width), len(r.row_slots))
            expect(0 not in r.row_slots, f"step {s} request {i} row slots", "no padding slot 0", list(r.row_slots))
            for pos, slot in enumerate(r.row_slots):
                expect(slot not in seen, f"step {s} slot {slot}", "owned by one request position",
                       f"request {seen.get(slot)} and request {i} position {pos}")
                seen[slot] = (i, pos)
            if previous[i] is not None:
                expect_equal(f"step {s} request {i} slots of positions held before", previous[i],
                             r.row_slots[: len(previous[i])])
            previous[i] = r.row_slots


@contract("KV-004", "one writer: a decode step writes each request's allocated length at most once",
          requires={KV}, cases=EDGE)
def one_writer_per_step(engine, plan):
    case, steps = _steps(engine, plan)
    for s, step in _reserved(case, steps):
        for i, r in enumerate(step.requests):
            expect(r.allocated_writes <= 1, f"step {s} request {i} writes of the allocated length", "<= 1", r.allocated_writes)
