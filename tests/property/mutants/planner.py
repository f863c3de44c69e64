"""Verify-planner bugs: overspending, non-prefix picks, unstable tie order, wrong budget rules, layout slips."""

import math

import torch

from dspark import planner

from . import Mutant

_real_select = planner.select_cells
_real_budget = planner.compute_verify_token_budget
_real_scatter = planner.RaggedVerifyLayout.scatter
_real_pad = planner.pad_verify_lens_to_bucket
_real_sps_init = planner.SpsCostTable.__post_init__


def _ordered_select(pos_desc=False, req_desc=lambda budget: False, extra=0):
    def select(surv, budget, *, eps=planner.SURVIVAL_EPS):
        bs, gamma = surv.shape
        cells = [(float(surv[r, k]), k, r) for r in range(bs) for k in range(gamma) if float(surv[r, k]) >= eps]
        flip_req = req_desc(budget)
        cells.sort(key=lambda c: (-c[0], -c[1] if pos_desc else c[1], -c[2] if flip_req else c[2]))
        picked = torch.zeros(bs, gamma, dtype=torch.bool)
        for _, k, r in cells[: max(int(budget) + extra, 0)]:
            picked[r, k] = True
        return picked
    return select


def _budget_counts_invalid(lagged_survival, table=None, *, eps=planner.SURVIVAL_EPS, force_budget_frac=None):
    return _real_budget(lagged_survival, table, eps=-1.0, force_budget_frac=force_budget_frac)


def _forced_rounds(frac, bs, gamma):
    return max(0, math.ceil(planner.check_budget_frac(frac) * bs * gamma))


def _ceil_lookup(self, tokens):
    for probe, sps in zip(self.sample_batch_tokens, self.sample_steps_per_sec):
        if probe >= tokens:
            return sps
    return self.sample_steps_per_sec[-1]


def _unchecked_probes(self):
    object.__setattr__(self, "sample_batch_tokens", tuple(self.sample_batch_tokens))
    object.__setattr__(self, "sample_steps_per_sec", tuple(self.sample_steps_per_sec))
    if self.max_batch_tokens is None:
        object.__setattr__(self, "max_batch_tokens", max(self.sample_batch_tokens))


def _scatter_shifted(self, rows, fill=0.0):
    out = _real_scatter(self, rows, fill)
    return torch.roll(out, 1, dims=1) if out.numel() else out


def _leftover_on_first_pad_row(verify_lens, graph_num_tokens, padded_bs):
    lens = verify_lens.to(torch.int64)
    n_pad = padded_bs - lens.shape[0]
    if n_pad == 0:
        return _real_pad(verify_lens, graph_num_tokens, padded_bs)
    pad = torch.zeros(n_pad, dtype=torch.int64)
    pad[0] = graph_num_tokens - int(lens.sum())
    return torch.cat([lens, pad])


def _pad_rows_never_empty(verify_lens, graph_num_tokens, padded_bs):
    """Every pad row gets at least one token: right unless the leftover is smaller than the pad rows."""
    out = _real_pad(verify_lens, graph_num_tokens, padded_bs)
    out[verify_lens.shape[0]:] = out[verify_lens.shape[0]:].clamp(min=1)
    return out


_real_plan_step = planner.plan_step


def _forced_fraction_ignored_when_flat(budget_confidence, confidence, *, verify_mode, table=None, force_budget_frac=None,
                                       **kw):
    """Compact mode with a flat table serves a cached verify-all layout, whatever fraction is forced."""
    step = _real_plan_step(budget_confidence, confidence, verify_mode=verify_mode, table=table,
                           force_budget_frac=force_budget_frac, **kw)
    if verify_mode == "compact" and table is None and step.verify_lens is not None:
        step.verify_lens = torch.full_like(step.verify_lens, confidence.shape[1] + 1)
    return step


def _forced_fraction_drops_the_layout(budget_confidence, confidence, *, verify_mode, force_budget_frac=None, **kw):
    """A forced fraction returns no layout at all, which the caller reads as verify-all."""
    step = _real_plan_step(budget_confidence, confidence, verify_mode=verify_mode, force_budget_frac=force_budget_frac,
                           **kw)
    if force_budget_frac is not None:
        step.verify_lens, step.graph_num_tokens = None, None
    return step


def _set_select(fn):
    return lambda mp: mp.setattr(planner, "select_cells", fn)


MUTANTS = [
    Mutant("schedule-overspends-budget", ("PLAN-001",), _set_select(_ordered_select(extra=1))),
    Mutant("picks-skip-a-position", ("PLAN-002",), _set_select(_ordered_select(pos_desc=True))),
    Mutant("tie-order-flips-with-budget-parity", ("PLAN-002", "PLAN-003"),
           _set_select(_ordered_select(req_desc=lambda budget: budget % 2 == 1))),
    Mutant("budget-counts-invalid-cells", ("PLAN-004", "PLAN-006"),
           lambda mp: mp.setattr(planner, "compute_verify_token_budget", _budget_counts_invalid)),
    Mutant("forced-fraction-rounds-up", ("PLAN-005",), lambda mp: mp.setattr(planner, "forced_budget", _forced_rounds)),
    Mutant("sps-lookup-takes-next-probe", ("PLAN-007",),
           lambda mp: mp.setattr(planner.SpsCostTable, "lookup", _ceil_lookup)),
    Mutant("sps-probes-not-validated", ("PLAN-007",),
           lambda mp: mp.setattr(planner.SpsCostTable, "__post_init__", _unchecked_probes)),
    Mutant("compact-scatter-off-by-one", ("PLAN-008",),
           lambda mp: mp.setattr(planner.RaggedVerifyLayout, "scatter", _scatter_shifted)),
    Mutant("forced-fraction-ignored-by-verify-all", ("PLAN-010",),
           lambda mp: mp.setattr(planner, "plan_step", _forced_fraction_ignored_when_flat)),
    Mutant("forced-fraction-drops-the-layout", ("PLAN-010",),
           lambda mp: mp.setattr(planner, "plan_step", _forced_fraction_drops_the_layout)),
    Mutant("zero-length-pad-rows-get-a-token", ("PLAN-009",), lambda mp: mp.setattr(planner, "pad_verify_lens_to_bucket",
                                                                              _pad_rows_never_empty)),
    Mutant("bucket-leftover-on-first-pad-row", ("PLAN-009",),
           lambda mp: mp.setattr(planner, "pad_verify_lens_to_bucket", _leftover_on_first_pad_row)),
]
