"""Planner level on SGLang: a real `DSparkVerifyPlanner` (its own __init__, SPS table loading, budget planner)
and the entry points the worker calls: `set_forced_budget_frac`, `compute_budget_sync` (what
`resolve_verify_token_budget` runs without overlap), `schedule_layout`; the compact-layout helpers
`run_compact` uses; `SpsCostTable` and its lookup.

The planner is built as under overlap scheduling, where its budget reads the relayed confidence with no
carry ring (`relay_lag_steps` = the relay's lag): the lag is the relay's and not modelled here, so a step's
budget is a function of the confidence given. Substituted: the draft model (any object with a
confidence head) and the model runner (the real request pool; the decode graph runner as the fields
`ragged_capture_num_tokens` reads: ragged mode, max_bs, capture_num_tokens). SGLang fixes
min_verify_len = 1 and rejects empty batches in its layout helpers, so it declares neither
`planner.min-verify-len` nor `planner.empty-batch`.
"""

from __future__ import annotations

import contextlib
import json
import os
from types import SimpleNamespace

import torch

from contracts.adapters.sglang import env as sglang_env
from contracts.adapters.sglang.runtime import CPU, runtime, single_rank_tp_sync
from contracts.boundary.engine import CompactView, PlanCase, PlanView, SpsSpec


@contextlib.contextmanager
def verify_planner(pool, gamma: int, *, overlap: bool, mode: str = "cap-accept", sps_path=None, graphs=None,
                   max_running_requests=None, tp_rank: int = 0, tp_sync=None):
    """A real DSparkVerifyPlanner over `pool`, yielded while its config is published (ragged mode, overlap, the SPS
    table path); the draft model is any object with a confidence head, the graph runner the fields it reads."""
    rt = runtime()
    from sglang.srt.environ import envs
    from sglang.srt.speculative.dspark_components.dspark_planner import DSparkVerifyPlanner

    T = gamma + 1
    spec = dict(speculative_dspark_sps_table_path=sps_path, speculative_dspark_confidence_sts_path=None,
                speculative_dspark_align_verify_tokens_to_graph_tier=False)
    with rt.config(num_draft_tokens=T, overlap=overlap, max_running_requests=max_running_requests, spec=spec), \
            envs.SGLANG_RAGGED_VERIFY_MODE.override(mode):
        yield DSparkVerifyPlanner(
            draft_model=SimpleNamespace(confidence_head=object()), gamma=gamma,
            model_runner=SimpleNamespace(req_to_token_pool=pool, decode_cuda_graph_runner=graphs), device=CPU,
            tp_rank=tp_rank, verify_num_draft_tokens=T, tp_sync=tp_sync or single_rank_tp_sync())


def _table_json(sps: SpsSpec) -> str:
    if sps.kind == "additive":
        return json.dumps(dict(bias_seconds=sps.bias_seconds, bs_probes=[p[0] for p in sps.alpha_points],
                               alpha_seconds=[p[1] for p in sps.alpha_points], m_probes=[p[0] for p in sps.theta_points],
                               theta_seconds=[p[1] for p in sps.theta_points]))
    return json.dumps(dict(sample_batch_tokens=list(sps.probes), sample_steps_per_sec=list(sps.values),
                           max_batch_tokens=max(sps.probes)))


class SGLangPlanner:
    _planners: dict = {}

    def _table_path(self, sps):
        if sps is None:
            return None
        d = getattr(self, "_sps_dir", None) or sglang_env.scratch_dir("dspark-contracts-sps-")
        self._sps_dir = d
        path = os.path.join(d, f"sps-{abs(hash(sps))}.json")
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write(_table_json(sps))
        return path

    def _planner(self, mode: str, gamma: int, sps, capture_bs=None):
        """One DSparkVerifyPlanner per configuration (construction loads the table; steps do not change it)."""
        key = (mode, gamma, sps, capture_bs)
        if key not in self._planners:
            runtime()
            from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

            T = gamma + 1
            pool = ReqToTokenPool(size=64, max_context_len=8, device="cpu", enable_memory_saver=False)
            graphs = None if capture_bs is None or mode != "compact" else SimpleNamespace(
                ragged_verify_mode=True, max_bs=max(capture_bs), capture_num_tokens=sorted({b * T for b in capture_bs}))
            with verify_planner(pool, gamma, overlap=True, mode=mode, sps_path=self._table_path(sps), graphs=graphs,
                                max_running_requests=64) as planner:
                self._planners[key] = (planner, pool)
        return self._planners[key]

    @staticmethod
    @contextlib.contextmanager
    def _rows(pool, bs: int):
        """bs fresh pool rows (generation >= 1) for one planner call, freed afterwards."""
        rows = torch.tensor(pool.alloc_rows(bs), dtype=torch.int64)
        try:
            yield rows
        finally:
            pool.free_rows(rows.tolist())

    def _resolve(self, planner, pool, conf, frac):
        with self._rows(pool, conf.shape[0]) as rows:
            planner.set_forced_budget_frac(frac)
            with runtime().config(overlap=False):
                return planner.compute_budget_sync(confidence=conf, prefix_lens=torch.zeros_like(rows),
                                                   req_pool_indices=rows)

    def verify_token_budget(self, confidence, sps, force_budget_frac, eps):
        planner, pool = self._planner("cap-accept", confidence.shape[1], sps)
        return int(self._resolve(planner, pool, confidence.to(torch.float32), force_budget_frac))

    def schedule_verify_lens(self, confidence, budget, min_verify_len, eps):
        planner, pool = self._planner("cap-accept", confidence.shape[1], None)
        with self._rows(pool, confidence.shape[0]) as rows:
            layout = planner.schedule_layout(req_pool_indices=rows, prefix_lens=torch.zeros_like(rows), device=CPU,
                                             confidence=confidence.to(torch.float32), budget=int(budget))
        return [int(n) for n in layout.verify_lens.tolist()], None

    def plan_layout(self, case: PlanCase) -> PlanView:
        planner, pool = self._planner(case.verify_mode, case.gamma, case.sps, case.capture_bs)
        conf = torch.tensor(case.confidence, dtype=torch.float32)
        with self._rows(pool, conf.shape[0]) as rows:
            planner.set_forced_budget_frac(case.force_budget_frac)
            with runtime().config(overlap=False):
                budget = planner.resolve_verify_token_budget(
                    draft_input=SimpleNamespace(verify_token_budget=None), confidence=conf,
                    prefix_lens=torch.zeros_like(rows), req_pool_indices=rows) if case.verify_mode != "static" else None
            layout = planner.schedule_layout(req_pool_indices=rows, prefix_lens=torch.zeros_like(rows), device=CPU,
                                             confidence=conf, budget=budget)
        if layout is None:
            return PlanView(budget, None)
        return PlanView(budget, [int(n) for n in layout.verify_lens.tolist()], int(layout.graph_num_tokens),
                        [int(x) for x in layout.qo_indptr_device.tolist()])

    def new_sps_table(self, sps: SpsSpec):
        runtime()
        from sglang.srt.speculative.dspark_components.dspark_sps import SpsCostTable

        return SpsCostTable(sample_batch_tokens=list(sps.probes), sample_steps_per_sec=list(sps.values),
                            max_batch_tokens=max(sps.probes))

    def sps_lookup(self, sps: SpsSpec, tokens: int) -> float:
        return float(self.new_sps_table(sps).lookup(tokens))

    def compact_layout(self, verify_lens, width, pad_to, candidates, fill):
        runtime()
        from sglang.kernels.ops.speculative.dspark.dspark_verify_window import (
            ScatterCompactToStrided,
            compact_row_index,
            compact_verify_ids,
        )
        from sglang.srt.speculative.ragged_verify import RaggedVerifyLayout

        total = sum(verify_lens)
        layout = RaggedVerifyLayout.from_verify_lens(verify_lens_cpu=list(verify_lens), device=CPU,
                                                     grid=[total if pad_to is None else pad_to])
        req_id, within, valid = compact_row_index(verify_lens=layout.verify_lens, padded_total=layout.graph_num_tokens,
                                                  device=CPU)
        packed = compact_verify_ids(draft_block_ids=candidates[:, :1], draft_tokens=candidates[:, 1:], layout=layout,
                                    device=CPU)
        scattered = ScatterCompactToStrided.execute(compact=packed.to(torch.float64)[:, None], layout=layout,
                                                    fill_value=float(fill), verify_num_draft_tokens=width)
        return CompactView([int(x) for x in layout.qo_indptr_device.tolist()], req_id.tolist(), within.tolist(),
                           [bool(v) for v in valid.tolist()], packed.to(torch.int64),
                           scattered.reshape(len(verify_lens), width).to(torch.int64))

    def pad_verify_lens_to_graph(self, verify_lens, graph_num_tokens, padded_bs):
        runtime()
        from sglang.kernels.ops.speculative.ragged_verify_kernels import pad_verify_lens_to_bucket

        out = pad_verify_lens_to_bucket(verify_lens=torch.tensor(verify_lens, dtype=torch.int32),
                                        graph_num_tokens=graph_num_tokens, bs=len(verify_lens), padded_bs=padded_bs)
        return [int(x) for x in out.tolist()]
