"""The confidence-scheduled ("ragged") verify planner.

Mirrors SGLang's `dspark_sps.py` (cost tables), `dspark_planner.py`
(`compute_verify_token_budget`, the forced budget fraction),
`dspark_schedule.py` (`schedule_verify_lens_topk`) and `ragged_verify.py`
(the compact layout, `pad_verify_lens_to_bucket`).

Survival `S[r, k] = prod_{j<=k} c[r, j]` is the predicted probability that
drafts 1..k+1 of request r all pass. The budget is the number of extra verify
tokens beyond each request's anchor; verify lengths hand it out to the
highest-survival cells, so each row's picks form a prefix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from dspark import _validate
from dspark.graph_buckets import graph_batch_size

SURVIVAL_EPS = 1e-6


def survival(confidence: torch.Tensor) -> torch.Tensor:
    """Cumulative product of the confidences along the gamma positions ([bs, gamma] -> [bs, gamma])."""
    _validate.probabilities("confidence", _validate.matrix("confidence", confidence))
    return torch.cumprod(confidence.to(torch.float64), dim=1)


# ---- cost tables ---------------------------------------------------------------


@dataclass(frozen=True)
class SpsCostTable:
    """Steps per second measured at increasing batch verify-token counts (floor lookup)."""

    sample_batch_tokens: tuple
    sample_steps_per_sec: tuple
    max_batch_tokens: Optional[int] = None

    def __post_init__(self):
        probes, sps = tuple(self.sample_batch_tokens), tuple(self.sample_steps_per_sec)
        object.__setattr__(self, "sample_batch_tokens", probes)
        object.__setattr__(self, "sample_steps_per_sec", sps)
        if not probes:
            raise ValueError("sample_batch_tokens: at least one probe is required")
        if len(probes) != len(sps):
            raise ValueError(f"sample_steps_per_sec: {len(sps)} values for {len(probes)} probes")
        if any(b <= a for a, b in zip(probes, probes[1:])):
            raise ValueError(f"sample_batch_tokens: probes must be strictly increasing, got {list(probes)}")
        if any(not (s > 0 and math.isfinite(s)) for s in sps):
            raise ValueError(f"sample_steps_per_sec: values must be finite and > 0, got {list(sps)}")
        if self.max_batch_tokens is None:
            object.__setattr__(self, "max_batch_tokens", probes[-1])
        elif _validate.integer("max_batch_tokens", self.max_batch_tokens) < probes[-1]:
            raise ValueError(f"max_batch_tokens: {self.max_batch_tokens} is below the last probe {probes[-1]}")

    def lookup(self, tokens: int) -> float:
        """SPS at the largest probe <= tokens; the first probe when below range."""
        i = 0
        for j, probe in enumerate(self.sample_batch_tokens):
            if probe <= tokens:
                i = j
        return self.sample_steps_per_sec[i]

    def throughput(self, bs: int, extra: int, tau: float) -> float:
        return tau * self.lookup(bs + extra)

    @property
    def is_flat(self) -> bool:
        return len(set(self.sample_steps_per_sec)) == 1


def flat_sps_table() -> SpsCostTable:
    """The uninitialised table: one probe, so the budget is verify-all."""
    return SpsCostTable((1,), (1.0,))


def _interp(points: Sequence[tuple], x: float) -> float:
    """Piecewise-linear interpolation over sorted (x, y) points, clamped at both ends."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


@dataclass(frozen=True)
class SpsAdditiveCostTable:
    """`step_time(B, M) = bias + alpha(B) + theta(M)`, M = total verify tokens; alpha, theta interpolated."""

    bias_seconds: float
    alpha_points: tuple  # ((batch_size, seconds), ...), strictly increasing sizes
    theta_points: tuple  # ((verify_tokens, seconds), ...)

    def __post_init__(self):
        if not _validate.finite("bias_seconds", self.bias_seconds) > 0:
            raise ValueError(f"bias_seconds: must be > 0, got {self.bias_seconds}")
        for name in ("alpha_points", "theta_points"):
            pts = tuple(tuple(p) for p in _validate.listed(name, getattr(self, name)))
            object.__setattr__(self, name, pts)
            if not pts:
                raise ValueError(f"{name}: at least one point is required")
            for p in pts:
                if len(p) != 2:
                    raise ValueError(f"{name}: expected (size, seconds) pairs, got {p}")
                for v in p:
                    _validate.finite(f"{name}[]", v)
            if any(b[0] <= a[0] for a, b in zip(pts, pts[1:])):
                raise ValueError(f"{name}: sizes must be strictly increasing")
            if any(p[1] < 0 for p in pts):
                raise ValueError(f"{name}: seconds must be >= 0")

    def step_time(self, bs: int, tokens: int) -> float:
        return self.bias_seconds + _interp(self.alpha_points, bs) + _interp(self.theta_points, tokens)

    def throughput(self, bs: int, extra: int, tau: float) -> float:
        return tau / self.step_time(bs, bs + extra)

    @property
    def is_flat(self) -> bool:
        return False


# ---- budget ------------------------------------------------------------------------


def check_budget_frac(frac) -> Optional[float]:
    if frac is None:
        return None
    if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not (0 < frac <= 1):
        raise ValueError(f"force_budget_frac: must lie in (0, 1] or be None, got {frac!r}")
    return float(frac)


def forced_budget(frac: float, bs: int, gamma: int) -> int:
    """`dspark_force_budget_frac`: floor(frac * bs * gamma), bypassing the cost model."""
    return max(0, math.floor(check_budget_frac(frac) * bs * gamma))


def compute_verify_token_budget(lagged_survival: torch.Tensor, table=None, *, eps: float = SURVIVAL_EPS,
                                force_budget_frac: Optional[float] = None) -> int:
    """Extra verify tokens b maximising `tau(b) * SPS(bs + b)` (first maximum); `tau(b) = bs + sum of the top b`.

    Only cells with survival >= eps are candidates, so `0 <= b <= #valid <= bs*gamma`.
    """
    bs, gamma = _validate.matrix("lagged_survival", lagged_survival).shape
    if force_budget_frac is not None:
        return forced_budget(force_budget_frac, bs, gamma)
    _validate.probabilities("lagged_survival", lagged_survival)  # a NaN would drop out of the candidates unseen
    table = flat_sps_table() if table is None else table
    if not isinstance(table, (SpsCostTable, SpsAdditiveCostTable)):
        raise TypeError(f"table: expected an SpsCostTable or SpsAdditiveCostTable, got {type(table).__name__}")
    values = lagged_survival.reshape(-1)
    values = torch.sort(values[values >= eps], descending=True).values.tolist()
    best_b, best, tau = 0, table.throughput(bs, 0, float(bs)), float(bs)
    for b, v in enumerate(values, start=1):
        tau += v
        theta = table.throughput(bs, b, tau)
        if theta > best:
            best_b, best = b, theta
    return best_b


# ---- verify lengths --------------------------------------------------------------


def select_cells(surv: torch.Tensor, budget: int, *, eps: float = SURVIVAL_EPS) -> torch.Tensor:
    """The top `budget` cells by (value desc, position asc, request asc); cells below eps are never picked. [bs, gamma] bool."""
    bs, gamma = _validate.matrix("surv", surv).shape
    _validate.integer("budget", budget)
    # Cells laid out position-major (position asc, then request asc), so one stable descending sort by value
    # gives the whole (value desc, position asc, request asc) order.
    flat = surv.to(torch.float64).t().reshape(-1)
    order = torch.argsort(flat, descending=True, stable=True)
    chosen = order[flat[order] >= eps][: max(budget, 0)]
    picked = torch.zeros(gamma * bs, dtype=torch.bool)
    picked[chosen] = True
    return picked.reshape(gamma, bs).t()


def schedule_verify_lens(surv: torch.Tensor, budget: int, *, min_verify_len: int = 1, max_verify_len: Optional[int] = None,
                         eps: float = SURVIVAL_EPS, return_selected: bool = False):
    """`L_r = clamp(min_verify_len + picks_r, max(min_verify_len, 1), max_verify_len)`, int64 [bs]."""
    bs, gamma = _validate.matrix("surv", surv).shape
    max_len = gamma + 1 if max_verify_len is None else max_verify_len
    _validate.nonnegative_int("min_verify_len", min_verify_len)
    if not max(min_verify_len, 1) <= _validate.integer("max_verify_len", max_len) <= gamma + 1:
        raise ValueError(f"max_verify_len: must lie in [max(min_verify_len, 1), gamma+1={gamma + 1}], got {max_len}")
    selected = select_cells(surv, budget, eps=eps)
    picks = selected.sum(dim=1)
    lens = torch.clamp(min_verify_len + picks, max(min_verify_len, 1), max_len).to(torch.int64)
    return (lens, selected) if return_selected else lens


# ---- compact (ragged) layout -------------------------------------------------------


def build_qo_indptr(verify_lens: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.zeros(1, dtype=torch.int32), torch.cumsum(verify_lens, 0).to(torch.int32)])


@dataclass
class RaggedVerifyLayout:
    """Packed rows of a compact verify: request r owns rows `qo_indptr[r] .. qo_indptr[r+1]`; rows past the total are padding."""

    verify_lens: torch.Tensor  # int64 [bs]
    width: int  # T = gamma + 1, the strided row width
    window: torch.Tensor  # int64 [total]: the strided row `req * T + within` of each real packed row
    rows: int  # packed rows, padding included

    @classmethod
    def from_lens(cls, verify_lens: torch.Tensor, width: int, pad_to: Optional[int] = None) -> "RaggedVerifyLayout":
        lens = _validate.int_tensor("verify_lens", verify_lens).to(torch.int64)
        _validate.positive_int("width", width)
        _validate.in_range("verify_lens", lens, 1, width + 1)
        # The strided cells a row verifies, in row-major order: exactly the packed order.
        window = (torch.arange(width)[None, :] < lens[:, None]).reshape(-1).nonzero().flatten()
        total = int(window.shape[0])
        rows = total if pad_to is None else _validate.integer("pad_to", pad_to)
        if rows < total:
            raise ValueError(f"pad_to: {pad_to} is below the total verify tokens {total}")
        return cls(lens, width, window, rows)

    @property
    def total(self) -> int:  # sum(verify_lens): the real rows, ahead of the padding
        return int(self.window.shape[0])

    @property
    def qo_indptr(self) -> torch.Tensor:  # int32 [bs + 1]
        return build_qo_indptr(self.verify_lens)

    @property
    def valid(self) -> torch.Tensor:  # bool [rows]
        return torch.arange(self.rows) < self.total

    def _padded(self, real: torch.Tensor, pad: int) -> torch.Tensor:
        return torch.cat([real, real.new_full((self.rows - self.total,), pad)])

    @property
    def req_id(self) -> torch.Tensor:  # int64 [rows]; bs on padding
        return self._padded(self.window // self.width, self.verify_lens.shape[0])

    @property
    def within(self) -> torch.Tensor:  # int64 [rows]; 0 on padding
        return self._padded(self.window % self.width, 0)

    def window_index(self) -> torch.Tensor:
        """Strided row `req * T + within` of each packed row; -1 on padding."""
        return self._padded(self.window, -1)

    def pack(self, candidates: torch.Tensor) -> torch.Tensor:
        """Packed token ids from strided `candidates [bs, T]`; padding gets id 0."""
        want = [self.verify_lens.shape[0], self.width]
        if not isinstance(candidates, torch.Tensor) or list(candidates.shape) != want:
            raise ValueError(f"candidates: expected {want} (bs, width), got {_validate.shape_of(candidates)}")
        return self._padded(candidates.reshape(-1)[self.window], 0)

    def scatter(self, rows: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """Packed rows [n >= total, ...] back to strided [bs, T, ...]; unverified cells hold `fill`; rows past the total
        (padding) are not read."""
        bs, tail = self.verify_lens.shape[0], tuple(rows.shape[1:])
        out = rows.new_full((bs * self.width,) + tail, fill)
        out[self.window] = rows[: self.total]
        return out.reshape((bs, self.width) + tail)


def pad_verify_lens_to_bucket(verify_lens: torch.Tensor, graph_num_tokens: int, padded_bs: int) -> torch.Tensor:
    """Spread `graph_num_tokens - sum(L)` over the pad rows (`base + (i < rem)`), else onto the last real row."""
    lens = _validate.int_tensor("verify_lens", verify_lens, nonnegative=True).to(torch.int64)
    bs = lens.shape[0]
    _validate.integer("graph_num_tokens", graph_num_tokens)
    _validate.integer("padded_bs", padded_bs)
    if padded_bs < bs:
        raise ValueError(f"padded_bs: {padded_bs} is below the batch size {bs}")
    left = graph_num_tokens - int(lens.sum())
    if left < 0:
        raise ValueError(f"graph_num_tokens: {graph_num_tokens} is below the total verify tokens {int(lens.sum())}")
    n_pad = padded_bs - bs
    if n_pad:
        base, rem = divmod(left, n_pad)
        pad = torch.tensor([base + (i < rem) for i in range(n_pad)], dtype=torch.int64)
        out = torch.cat([lens, pad])
    else:
        out = lens.clone()
        if bs:
            out[-1] += left
    return out


# ---- one planner step ----------------------------------------------------------------


@dataclass
class PlannedStep:
    budget: Optional[int]
    verify_lens: Optional[torch.Tensor]  # int64 [bs]; None = static (verify all)
    graph_num_tokens: Optional[int]  # compact mode: the captured token tier the packed rows are padded to


def compact_graph_tier(verify_lens: torch.Tensor, capture_num_tokens: Optional[Sequence[int]]) -> Optional[int]:
    """The smallest captured token tier that holds a compact step's sum(L) tokens; None without graphs or when none
    does (the step runs eagerly)."""
    if not capture_num_tokens:
        return None
    return graph_batch_size(int(verify_lens.sum()), sorted(capture_num_tokens))


def plan_step(budget_confidence: torch.Tensor, confidence: torch.Tensor, *, verify_mode: str, table=None,
              force_budget_frac: Optional[float] = None, capture_num_tokens: Optional[Sequence[int]] = None,
              min_verify_len: int = 1, max_verify_len: Optional[int] = None, eps: float = SURVIVAL_EPS) -> PlannedStep:
    """The budget (from the lagged `budget_confidence`), this step's verify lengths (from `confidence`) and, in
    compact mode with captured graphs, the smallest token tier that holds them (None when none does)."""
    if verify_mode not in ("static", "cap-accept", "compact"):
        raise ValueError(f"verify_mode: expected 'static', 'cap-accept' or 'compact', got {verify_mode!r}")
    if verify_mode == "static":
        return PlannedStep(None, None, None)
    if _validate.matrix("budget_confidence", budget_confidence).shape != _validate.matrix("confidence", confidence).shape:
        raise ValueError(f"budget_confidence: {list(budget_confidence.shape)} != confidence {list(confidence.shape)} "
                         "(one lagged row per request of the step)")
    budget = compute_verify_token_budget(survival(budget_confidence), table, eps=eps, force_budget_frac=force_budget_frac)
    lens = schedule_verify_lens(survival(confidence), budget, min_verify_len=min_verify_len, max_verify_len=max_verify_len,
                                eps=eps)
    return PlannedStep(budget, lens, compact_graph_tier(lens, capture_num_tokens) if verify_mode == "compact" else None)
