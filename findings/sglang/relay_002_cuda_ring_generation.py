"""RELAY-002 (SGLang 0.5.23): on CUDA, the DSpark confidence relay's ring records the pool's row generation at PUBLISH
time for every row, so a row a PD decode server pre-allocates before the request's KV transfer completes passes the
freshness check with its previous occupant's confidence. The same root as RELAY-001 (the relay's read does not carry
the writer's generation; relay_001_host_relay_current_generation.py): one draft report for both,
relay_writer_generation.md.

ConfidenceRelay (managers/overlap_utils.py) on CUDA: every confidence publish scatters the batch's confidence into
confidence_buf[rows] and then copies ALL of confidence_buf into ring slot ring_pos % 3 together with
pool.req_generation as it is at that moment (issue_ring_copy, overlap_utils.py:237-246); resolve() reads the slot
CONFIDENCE_RELAY_RING_LAG (2) publishes back (overlap_utils.py:268-278). A row whose request has not published yet
keeps the previous occupant's confidence in confidence_buf (or torch.empty contents, if never written), but the ring
stores it next to the NEW request's generation. A PD decode server bumps that generation at pre-allocation
(DecodePreallocQueue._pre_alloc -> DecodeReqToTokenPool.alloc, disaggregation/decode.py:2257, 238-259), and decode
steps of the running batch publish while the KV transfer is in flight; the prebuilt batch that admits the request
publishes no confidence (dspark_disaggregation.py:28). HostConfidenceBudgetPlanner._two_steps_prior_survival
(speculative/dspark_components/dspark_planner.py:1018-1030) accepts a read when the relayed generation equals the
row's current one, so the new request's first decode steps plan their verify budget from another request's
confidence.

Scenario: PD decode pool of 2 rows, gamma 2, overlap on, cap-accept mode; requests 0 and 1 decode from step 0;
request 0 finishes after step 1 and frees row 1; request 2 is pre-allocated row 1 before step 2 (KV transfer in
flight through steps 2 and 3) and joins at step 4 (prebuilt, merged into the running batch). Expected: at step s a
request's budget reads cumprod(its own confidence from step s - 2), or ones when it was not in step s - 2's batch.

    python findings/sglang/relay_002_cuda_ring_generation.py             # exits 1 on sglang 0.5.23
    python findings/sglang/relay_002_cuda_ring_generation.py --with-fix  # in-process fix, exits 0

The CUDA branch is selected on this CPU by overlap_utils._is_cuda = True, with stand-ins, only in overlap_utils'
namespace, for what it asks of the device: a stream whose wait_event / stream context do nothing, events whose
record / query complete at once, and plain host tensors for pin_memory=True. Everything else is SGLang's own code.
Imports only the standard library, torch and sglang (plus _cpu_setup.py next to this file).
"""

import argparse
import contextlib
import os
import sys
import types
from array import array
from types import SimpleNamespace

sys.dont_write_bytecode = True  # no __pycache__ next to the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cpu_setup  # noqa: E402

FINDING = "RELAY-002"
POOL, GAMMA = 2, 2
# Per step: requests finished (freed) before it, requests pre-allocated (KV transfer starts), requests joining the
# running batch (transfer complete: prebuilt + merge), all before the step's decode.
STEPS = [dict(prealloc=(0, 1), join=(0, 1)), {}, dict(leave=(0,), prealloc=(2,)), {}, dict(join=(2,)), {}, {}]


def confidence(rid, step):
    """Distinct per request and step, so a read names its source."""
    return [round(0.9 - 0.2 * rid - 0.02 * step, 2), round(0.8 - 0.2 * rid - 0.02 * step, 2)]


class _Stream:  # the D2H stream: ordering calls return at once
    def wait_event(self, event):
        pass

    def wait_stream(self, stream):
        pass

    def synchronize(self):
        pass


class _Event:  # a device event that has completed when recorded
    queries = 0

    def record(self, stream=None):
        pass

    def query(self):
        _Event.queries += 1
        return True

    def synchronize(self):
        pass

    def wait(self, stream=None):
        pass


@contextlib.contextmanager
def cuda_branch():
    """overlap_utils takes its is_cuda() branch; its torch is seen through a view with the stand-in device module."""
    import torch
    from sglang.srt.managers import overlap_utils as ou

    view = types.ModuleType("torch")
    view.__dict__.update(torch.__dict__)
    view.get_device_module = lambda device=None: SimpleNamespace(Stream=_Stream, Event=_Event,
                                                                 stream=lambda s=None: contextlib.nullcontext())
    view.empty = lambda *a, pin_memory=False, **k: torch.empty(*a, **k)
    saved = ou._is_cuda, ou.torch
    ou._is_cuda, ou.torch = True, view
    try:
        yield
    finally:
        ou._is_cuda, ou.torch = saved


def apply_fix():
    """Minimal correction: keep, per row, the generation of the request whose confidence the row holds (set at
    scatter) and copy that, not the pool's current generation, into gen_ring at each ring copy. Upstream this is a
    `writer_generation` field of ConfidenceRelay; here a side table, as the msgspec Struct takes no new attributes."""
    import torch
    from sglang.srt.managers import overlap_utils as ou

    writers = {}
    real_scatter, real_copy = ou.ConfidenceRelay.scatter, ou.ConfidenceRelay.issue_ring_copy

    def scatter(self, indices, conf):
        real_scatter(self, indices, conf)
        gen = writers.setdefault(id(self), torch.zeros(self.req_pool_size, dtype=torch.int64))
        rows = indices.to("cpu", torch.int64)
        gen[rows] = self.pool.req_generation[rows]

    def issue_ring_copy(self, *, stream, publish_ready):
        slot, pos = self.ring_pos % ou.CONFIDENCE_RELAY_RING_DEPTH, self.ring_pos
        real_copy(self, stream=stream, publish_ready=publish_ready)
        if self.ring_pos != pos:
            self.gen_ring[slot].copy_(writers[id(self)])

    ou.ConfidenceRelay.scatter = scatter
    ou.ConfidenceRelay.issue_ring_copy = issue_ring_copy


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-fix", action="store_true", help="apply the minimal correction in-process first")
    args = ap.parse_args()
    _cpu_setup.require_version(FINDING)
    os.environ["SGLANG_RAGGED_VERIFY_MODE"] = "cap-accept"  # any non-static mode relays confidence
    _cpu_setup.publish(speculative_algorithm="DSPARK", speculative_num_draft_tokens=GAMMA + 1, page_size=1,
                       disable_overlap_schedule=False, max_running_requests=POOL, attention_backend="torch_native")

    import torch
    from sglang.srt.disaggregation.decode import DecodeReqToTokenPool
    from sglang.srt.managers.overlap_utils import FutureMap, decide_needs_confidence_relay
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.speculative.dspark_components import dspark_planner
    from sglang.srt.speculative.dspark_components.dspark_draft import make_next_draft_input
    from sglang.srt.speculative.dspark_components.dspark_planner import DSparkVerifyPlanner
    from sglang.srt.speculative.dspark_disaggregation import build_dspark_disagg_draft_input
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_tp_sync import SpecTpSync

    if args.with_fix:
        apply_fix()

    cpu = torch.device("cpu")
    # A PD decode server's request pool (kv_cache_configurator._build_decode_req_pool), no extra slots.
    pool = DecodeReqToTokenPool(size=POOL, max_context_len=8, device="cpu", enable_memory_saver=False,
                                pre_alloc_size=0)
    planner = DSparkVerifyPlanner(
        draft_model=SimpleNamespace(confidence_head=object()), gamma=GAMMA,
        model_runner=SimpleNamespace(req_to_token_pool=pool, decode_cuda_graph_runner=None), device=cpu, tp_rank=0,
        verify_num_draft_tokens=GAMMA + 1, tp_sync=SpecTpSync(SimpleNamespace(world_size=1, rank_in_group=0)))

    seen = []
    real_budget = dspark_planner.compute_verify_token_budget

    def observed_budget(*, history_survival_probs, **kw):  # observation only: the survival the budget is planned on
        seen.append(history_survival_probs.clone())
        return real_budget(history_survival_probs=history_survival_probs, **kw)

    dspark_planner.compute_verify_token_budget = observed_budget

    def new_req(rid):
        params = SamplingParams(max_new_tokens=8)
        params.normalize(None)
        req = Req(f"pd{rid}", "", array("q", [1, 2]), params, vocab_size=32)
        req.output_ids.append(3)  # the first token, sampled by the prefill server
        return req

    wrong = []
    with cuda_branch():
        # As Scheduler.init_overlap builds it (decide_needs_confidence_relay, create_future_map), on the CUDA branch.
        fm = FutureMap(cpu, SpeculativeAlgorithm.DSPARK, pool, needs_cpu_seq_lens=True,
                       needs_confidence_relay=decide_needs_confidence_relay())
        print(f"relay: needs_confidence_relay {fm.needs_confidence_relay}, CUDA ring path "
              f"{fm.fwd_prepare_d2h_stream is not None}; planner lag {planner.lag_steps}, own carry "
              f"{planner._budget_planner.carry_steps} steps")
        reqs, running, batches = {}, [], []  # rid -> Req; the running batch; per step {rid: row}
        for s, step in enumerate(STEPS):
            for r in step.get("leave", ()):  # release_kv_cache of the finished request
                pool.free(reqs.pop(r))
                running.remove(r)
            for r in step.get("prealloc", ()):  # DecodePreallocQueue._pre_alloc: row taken, KV transfer starts
                reqs[r] = new_req(r)
                assert pool.alloc([reqs[r]]) is not None
            joined = step.get("join", ())
            if joined:  # transfer done: get_new_prebuilt_batch -> process_prebuilt, merged into the running batch
                rows = torch.tensor([reqs[r].kv.req_pool_idx for r in joined], dtype=torch.int64)
                prebuilt = SimpleNamespace(enable_overlap=True, req_pool_indices=rows,
                                           seq_lens=torch.full((len(rows),), 3, dtype=torch.int64))
                build_dspark_disagg_draft_input(prebuilt, torch.full((len(rows),), 3, dtype=torch.int64), fm)
                running += list(joined)
            rows = {r: reqs[r].kv.req_pool_idx for r in running}
            batches.append(rows)
            idx = torch.tensor([rows[r] for r in running], dtype=torch.int64)
            conf = torch.tensor([confidence(r, s) for r in running], dtype=torch.float32)
            di = make_next_draft_input(bonus_tokens=torch.ones(len(running), dtype=torch.int64),
                                       new_seq_lens=torch.ones(len(running), dtype=torch.int64))
            di.future_indices = idx
            batch = SimpleNamespace(spec_info=di, forward_mode=ForwardMode.DECODE, is_extend_in_batch=False,
                                    req_pool_indices=idx, req_pool_indices_cpu=idx,
                                    batch_size=lambda n=len(running): n)
            seen.clear()
            planner.prepare_verify_budget(batch, fm)  # Scheduler: _confidence_budget_prepare(batch, future_map)
            planner.resolve_verify_token_budget(draft_input=di, confidence=conf, prefix_lens=torch.zeros_like(idx),
                                                req_pool_indices=idx)  # DSparkWorkerV2's verify step
            read = seen[-1].tolist() if seen else None
            for i, r in enumerate(running):
                src = s - 2
                own = src >= 0 and r in batches[src]
                want = [1.0] * GAMMA
                if own:
                    c = confidence(r, src)
                    want = [c[0], c[0] * c[1]]
                got = None if read is None else [round(x, 4) for x in read[i]]
                if got is not None and not all(abs(a - b) <= 1e-5 for a, b in zip(got, want)):
                    source = [f"request {q}'s step {t}" for t in range(s) for q in batches[t]
                              if all(abs(a - b) < 1e-5 for a, b in
                                     zip(got, [confidence(q, t)[0], confidence(q, t)[0] * confidence(q, t)[1]]))]
                    wrong.append(f"step {s} request {r} (row {rows[r]}): read {got} (= {', '.join(source) or '?'}), "
                                 f"expected {[round(x, 4) for x in want]}")
            fm.publish(idx, torch.ones(len(running), dtype=torch.int64), confidence=conf)  # after the verify
    if _Event.queries == 0:
        print(f"{FINDING}: the CUDA ring was never read; the repro no longer exercises it")
        return 3
    print("expected: at step s each request's budget reads cumprod(its own step s-2 confidence), or ones when it "
          "was not in step s-2's batch")
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
