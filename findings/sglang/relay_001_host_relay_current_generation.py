"""RELAY-001 (SGLang 0.5.23): off CUDA, the DSpark confidence relay returns the newest confidence with the pool's
CURRENT row generation.

ConfidenceRelay (managers/overlap_utils.py) has two read paths. On CUDA (is_cuda(): torch.version.cuda set) it copies
the confidence and req_generation into a ring at each publish and resolve() reads CONFIDENCE_RELAY_RING_LAG (2)
publishes back, with the generation copied at that publish (the pool's, not the writer's: RELAY-002, the same root,
relay_002_cuda_ring_generation.py; one draft report for both: relay_writer_generation.md). Everywhere else (FutureMap.fwd_prepare_d2h_stream is None: ROCm,
where torch.version.cuda is None, Ascend NPU, Intel XPU) resolve() returns confidence_buf[rows] -- whatever the last
publish scattered -- together with pool.req_generation[rows] as it is NOW. The overlap budget planner
(HostConfidenceBudgetPlanner with relay_lag_steps = 2, so no carry ring of its own) then
  * plans step s from confidence one step old instead of two, and
  * accepts a freed-and-reused row's previous occupant's confidence for the new request: the generation check
    (lagged_generation == current_generation) compares the current generation with itself.

Scenario: pool 2, gamma 2, overlap on, cap-accept mode; requests 0 and 1 join at step 0, request 0 leaves after
step 1 and request 2 takes its row at step 2. Expected (the CUDA ring's contract): at step s a request's budget reads
cumprod(its own confidence from step s - 2), or ones when it held no row then (a read may also be skipped).

    python findings/sglang/relay_001_host_relay_current_generation.py             # exits 1 on sglang 0.5.23
    python findings/sglang/relay_001_host_relay_current_generation.py --with-fix  # in-process fix, exits 0

The CPU here stands in for the non-CUDA devices: the host path is chosen by is_cuda() alone. Imports only the
standard library, torch and sglang (plus _cpu_setup.py next to this file).
"""

import argparse
import os
import sys
from types import SimpleNamespace

sys.dont_write_bytecode = True  # no __pycache__ next to the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cpu_setup  # noqa: E402

FINDING = "RELAY-001"
POOL, GAMMA = 2, 2
STEPS = [dict(join=(0, 1)), {}, dict(leave=(0,), join=(2,)), {}, {}]


def confidence(rid, step):
    """Distinct per request and step, so a read names its source."""
    return [round(0.9 - 0.2 * rid - 0.02 * step, 2), round(0.8 - 0.2 * rid - 0.02 * step, 2)]


def apply_fix():
    """Minimal correction: the host path keeps the CUDA path's ring (a synchronous copy at publish, with the writer's
    generation, recorded per row at scatter as RELAY-002's fix records it) and reads CONFIDENCE_RELAY_RING_LAG
    publishes back."""
    import torch
    from sglang.srt.managers import overlap_utils as ou

    real_init, real_copy, real_resolve = (ou.ConfidenceRelay._lazy_init, ou.ConfidenceRelay.issue_ring_copy,
                                          ou.ConfidenceRelay.resolve)
    real_scatter, writers = ou.ConfidenceRelay.scatter, {}

    def scatter(self, indices, conf):  # upstream: a `writer_generation` field (the Struct takes no new attributes)
        real_scatter(self, indices, conf)
        gen = writers.setdefault(id(self), torch.zeros(self.req_pool_size, dtype=torch.int64))
        rows = indices.to("cpu", torch.int64)
        gen[rows] = self.pool.req_generation[rows]

    def _lazy_init(self, conf):
        real_init(self, conf)
        if self.conf_ring is None:  # not CUDA: a plain (unpinned) ring
            depth = ou.CONFIDENCE_RELAY_RING_DEPTH
            self.conf_ring = torch.zeros((depth, self.req_pool_size, conf.shape[-1]), dtype=torch.float32)
            self.gen_ring = torch.zeros((depth, self.req_pool_size), dtype=torch.int64)

    def issue_ring_copy(self, *, stream, publish_ready):
        if stream is not None or not self.initialized:
            return real_copy(self, stream=stream, publish_ready=publish_ready)
        slot = self.ring_pos % ou.CONFIDENCE_RELAY_RING_DEPTH
        self.conf_ring[slot].copy_(self.confidence_buf)  # synchronous: .cpu() semantics of the old host path
        self.gen_ring[slot].copy_(writers[id(self)])
        self.ring_pos += 1

    def resolve(self, batch, *, stream, publish_ready):
        if stream is not None:
            return real_resolve(self, batch, stream=stream, publish_ready=publish_ready)
        fi = None if batch.spec_info is None else batch.spec_info.future_indices
        if not self.initialized or fi is None or fi.shape[0] == 0 or self.ring_pos < ou.CONFIDENCE_RELAY_RING_LAG:
            return None
        slot = (self.ring_pos - ou.CONFIDENCE_RELAY_RING_LAG) % ou.CONFIDENCE_RELAY_RING_DEPTH
        idx = batch.req_pool_indices_cpu
        return ou.ResolvedConfidence(confidence=self.conf_ring[slot][idx], generation=self.gen_ring[slot][idx])

    ou.ConfidenceRelay._lazy_init = _lazy_init
    ou.ConfidenceRelay.scatter = scatter
    ou.ConfidenceRelay.issue_ring_copy = issue_ring_copy
    ou.ConfidenceRelay.resolve = resolve


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-fix", action="store_true", help="apply the minimal correction in-process first")
    args = ap.parse_args()
    _cpu_setup.require_version(FINDING)
    os.environ["SGLANG_RAGGED_VERIFY_MODE"] = "cap-accept"  # any non-static mode relays confidence
    _cpu_setup.publish(speculative_algorithm="DSPARK", speculative_num_draft_tokens=GAMMA + 1, page_size=1,
                       disable_overlap_schedule=False, max_running_requests=POOL, attention_backend="torch_native")

    import torch
    from sglang.srt.managers import overlap_utils
    from sglang.srt.managers.overlap_utils import FutureMap, decide_needs_confidence_relay
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.dspark_components import dspark_planner
    from sglang.srt.speculative.dspark_components.dspark_draft import make_next_draft_input
    from sglang.srt.speculative.dspark_components.dspark_planner import DSparkVerifyPlanner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_tp_sync import SpecTpSync

    if args.with_fix:
        apply_fix()

    cpu = torch.device("cpu")
    pool = ReqToTokenPool(size=POOL, max_context_len=8, device="cpu", enable_memory_saver=False)
    planner = DSparkVerifyPlanner(
        draft_model=SimpleNamespace(confidence_head=object()), gamma=GAMMA,
        model_runner=SimpleNamespace(req_to_token_pool=pool, decode_cuda_graph_runner=None), device=cpu, tp_rank=0,
        verify_num_draft_tokens=GAMMA + 1, tp_sync=SpecTpSync(SimpleNamespace(world_size=1, rank_in_group=0)))
    # As Scheduler.init_overlap builds it (scheduler.py: decide_needs_confidence_relay, create_future_map).
    fm = FutureMap(cpu, SpeculativeAlgorithm.DSPARK, pool, needs_cpu_seq_lens=True,
                   needs_confidence_relay=decide_needs_confidence_relay())
    print(f"relay: needs_confidence_relay {fm.needs_confidence_relay}, CUDA ring path "
          f"{fm.fwd_prepare_d2h_stream is not None} (is_cuda() {overlap_utils._is_cuda}); planner lag "
          f"{planner.lag_steps}, own carry {planner._budget_planner.carry_steps} steps")

    seen = []
    real_budget = dspark_planner.compute_verify_token_budget

    def observed_budget(*, history_survival_probs, **kw):  # observation only: the survival the budget is planned on
        seen.append(history_survival_probs.clone())
        return real_budget(history_survival_probs=history_survival_probs, **kw)

    dspark_planner.compute_verify_token_budget = observed_budget

    rows, held, wrong = {}, [], []  # rid -> row; per step {rid: row}
    for s, step in enumerate(STEPS):
        pool.free_rows([rows.pop(r) for r in step.get("leave", ())])  # the finished request's row freed
        for r in step.get("join", ()):
            rows[r] = pool.alloc_rows(1)[0]  # a new request takes a free row (generation bumped)
        rids = sorted(rows)
        held.append(dict(rows))
        idx = torch.tensor([rows[r] for r in rids], dtype=torch.int64)
        conf = torch.tensor([confidence(r, s) for r in rids], dtype=torch.float32)
        di = make_next_draft_input(bonus_tokens=torch.ones(len(rids), dtype=torch.int64),
                                   new_seq_lens=torch.ones(len(rids), dtype=torch.int64))
        di.future_indices = idx
        batch = SimpleNamespace(spec_info=di, forward_mode=ForwardMode.DECODE, is_extend_in_batch=False,
                                req_pool_indices=idx, req_pool_indices_cpu=idx, batch_size=lambda n=len(rids): n)
        seen.clear()
        planner.prepare_verify_budget(batch, fm)  # Scheduler: _confidence_budget_prepare(batch, future_map)
        planner.resolve_verify_token_budget(draft_input=di, confidence=conf, prefix_lens=torch.zeros_like(idx),
                                            req_pool_indices=idx)  # DSparkWorkerV2's verify step
        read = seen[-1].tolist() if seen else None
        for i, r in enumerate(rids):
            src = s - 2
            own = src >= 0 and held[src].get(r) == rows[r]
            want = [1.0] * GAMMA
            if own:
                c = confidence(r, src)
                want = [c[0], c[0] * c[1]]
            got = None if read is None else [round(x, 4) for x in read[i]]
            if got is not None and any(abs(a - b) > 1e-5 for a, b in zip(got, want)):
                source = [f"request {q}'s step {t}" for t in range(s) for q in held[t]
                          if all(abs(a - b) < 1e-5 for a, b in
                                 zip(got, [confidence(q, t)[0], confidence(q, t)[0] * confidence(q, t)[1]]))]
                wrong.append(f"step {s} request {r} (row {rows[r]}): read {got} (= {', '.join(source) or '?'}), "
                             f"expected {[round(x, 4) for x in want]}")
        fm.publish(idx, torch.ones(len(rids), dtype=torch.int64), confidence=conf)  # after the verify

    print("expected: at step s each request's budget reads cumprod(its own step s-2 confidence), or ones when it "
          "held no row then")
    print("observed: " + ("; ".join(wrong) if wrong else "every read as expected"))
    ok = not wrong
    print(f"{FINDING}: {'PASS' if ok else 'FAIL'}{' (with fix)' if args.with_fix else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # an error is neither "reproduced" (1) nor "fixed" (0)
        import traceback

        traceback.print_exc()
        sys.exit(3)
