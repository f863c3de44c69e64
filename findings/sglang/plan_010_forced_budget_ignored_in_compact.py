"""PLAN-010 (SGLang 0.5.23): a forced DSpark verify budget (dspark_force_budget_frac) is ignored in compact mode
while no SPS table is loaded.

DSparkVerifyPlanner.__init__ sets _is_verify_all when the ragged-verify mode is compact and the SPS table is the flat
uninitialized one (no --speculative-dspark-sps-table-path). schedule_layout then serves the uniform verify-all layout
from _uniform_layout_cache before it looks at the budget, so the budget that set_forced_budget_frac made
resolve_verify_token_budget return (HostConfidenceBudgetPlanner.compute_budget: frac * full budget) is never used:
every request verifies all gamma + 1 tokens. That is the configuration benchmark/dspark_sps_profiler.py --fracs
(the off-diagonal SPS sweep: compact mode, budget pinned per cell through /set_internal_state) profiles in.

Case: bs 2, gamma 4 (T = 5), confidence 0.9 everywhere, compact mode, no SPS table, no overlap, forced fraction 0.25:
the budget resolves to int(0.25 * 2 * 4) = 2 draft tokens, the layout verifies sum(L - 1) = 8.

    python findings/sglang/plan_010_forced_budget_ignored_in_compact.py             # exits 1 on sglang 0.5.23
    python findings/sglang/plan_010_forced_budget_ignored_in_compact.py --with-fix  # in-process fix, exits 0

Imports only the standard library, torch and sglang (plus _cpu_setup.py next to this file).
"""

import argparse
import os
import sys
from types import SimpleNamespace

sys.dont_write_bytecode = True  # no __pycache__ next to the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cpu_setup  # noqa: E402

FINDING = "PLAN-010"
BS, GAMMA, FRAC, CONF = 2, 4, 0.25, 0.9


def apply_fix():
    """Minimal correction: serve the verify-all cache only while no budget fraction is forced."""
    from sglang.srt.speculative.dspark_components.dspark_planner import DSparkVerifyPlanner

    real = DSparkVerifyPlanner.schedule_layout

    def schedule_layout(self, **kw):
        forced = self._budget_planner is not None and self._budget_planner.forced_budget_frac is not None
        if not (forced and self._is_verify_all):
            return real(self, **kw)
        self._is_verify_all = False  # i.e. `if self._is_verify_all and not forced and mode is COMPACT:`
        try:
            return real(self, **kw)
        finally:
            self._is_verify_all = True

    DSparkVerifyPlanner.schedule_layout = schedule_layout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-fix", action="store_true", help="apply the minimal correction in-process first")
    args = ap.parse_args()
    _cpu_setup.require_version(FINDING)
    os.environ["SGLANG_RAGGED_VERIFY_MODE"] = "compact"  # SGLang's env switch (sglang/srt/environ.py)
    _cpu_setup.publish(speculative_algorithm="DSPARK", speculative_num_draft_tokens=GAMMA + 1, page_size=1,
                       disable_overlap_schedule=True, max_running_requests=8, attention_backend="torch_native")

    import torch
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.speculative.dspark_components.dspark_planner import DSparkVerifyPlanner
    from sglang.srt.speculative.dspark_components.dspark_worker_v2 import DSparkWorkerV2
    from sglang.srt.speculative.spec_tp_sync import SpecTpSync

    if args.with_fix:
        apply_fix()

    cpu = torch.device("cpu")
    pool = ReqToTokenPool(size=8, max_context_len=64, device="cpu", enable_memory_saver=False)
    # The planner as DSparkWorkerV2 builds it; the draft model is any object with a confidence head, the model
    # runner the request pool (no decode graphs).
    planner = DSparkVerifyPlanner(
        draft_model=SimpleNamespace(confidence_head=object()), gamma=GAMMA,
        model_runner=SimpleNamespace(req_to_token_pool=pool, decode_cuda_graph_runner=None), device=cpu, tp_rank=0,
        verify_num_draft_tokens=GAMMA + 1, tp_sync=SpecTpSync(SimpleNamespace(world_size=1, rank_in_group=0)))
    print(f"planner: mode {planner.mode_value}, verify-all (flat SPS table) {planner.is_verify_all}")

    # /set_internal_state {"dspark_force_budget_frac": 0.25} -> InternalState._apply_dspark_budget_frac ->
    # DSparkWorkerV2.set_dspark_forced_budget_frac (here on a stand-in worker holding the real planner).
    DSparkWorkerV2.set_dspark_forced_budget_frac(
        SimpleNamespace(_hosts_draft=True, _verify_planner=planner, _forced_budget_frac=None), FRAC)

    rows = torch.tensor(pool.alloc_rows(BS), dtype=torch.int64)
    prefix_lens = torch.zeros_like(rows)
    confidence = torch.full((BS, GAMMA), CONF, dtype=torch.float32)
    # DSparkWorkerV2's verify step, in order: the budget, then the layout.
    budget = planner.resolve_verify_token_budget(draft_input=SimpleNamespace(verify_token_budget=None),
                                                 confidence=confidence, prefix_lens=prefix_lens, req_pool_indices=rows)
    layout = planner.schedule_layout(req_pool_indices=rows, prefix_lens=prefix_lens, device=cpu,
                                     confidence=confidence, budget=budget)
    lens = [int(n) for n in layout.verify_lens.tolist()]
    drafted = sum(n - 1 for n in lens)
    print(f"expected: forced fraction {FRAC} -> budget {budget} draft tokens; the layout verifies "
          f"sum(L - 1) <= {budget}")
    print(f"observed: budget {budget}; verify lens {lens}, sum(L - 1) = {drafted}")
    ok = drafted <= budget
    print(f"{FINDING}: {'PASS' if ok else 'FAIL'}{' (with fix)' if args.with_fix else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # an error is neither "reproduced" (1) nor "fixed" (0)
        import traceback

        traceback.print_exc()
        sys.exit(3)
