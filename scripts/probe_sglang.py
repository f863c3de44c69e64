#!/usr/bin/env python
"""Call the real sglang 0.5.23 DSpark code on a CPU and print what comes back.

Run from the repository root after `bash scripts/install_sglang.sh`:

    python scripts/probe_sglang.py            # all sections
    python scripts/probe_sglang.py fill accept  # only sections whose name contains a word

Every step prints the exact function path, its signature (from `inspect`), the
objects it had to build, and the result. That is the recipe an adapter needs.
Exit status: 0 when every step behaved as expected, 1 otherwise.
Based on shared/reference/sglang_probe/exp_*.py, rewritten against
contracts/adapters/sglang_env.py (no ad-hoc stubs).
"""

from __future__ import annotations

import inspect
import os
import sys
import time
import traceback
from types import SimpleNamespace
from typing import Any, Callable

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from contracts.adapters import sglang_env  # noqa: E402  (no sglang import yet)

FAILURES: list[str] = []
SELECTED = [a.lower() for a in sys.argv[1:]]


# ----------------------------------------------------------------------------- helpers
def show(x: Any) -> Any:
    """Compact, deterministic rendering of tensors and containers."""
    import torch

    if isinstance(x, torch.Tensor):
        return f"{x.tolist()}:{str(x.dtype).replace('torch.', '')}{list(x.shape) if x.dim() != 1 else ''}"
    if isinstance(x, (list, tuple)):
        return type(x)(show(v) for v in x)
    if isinstance(x, dict):
        return {k: show(v) for k, v in x.items()}
    return x


def sig(obj: Callable) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(?)"


def recipe(path: str, obj: Callable, built: str) -> None:
    print(f"  call  {path}{sig(obj)}")
    if built:
        for line in built.strip("\n").splitlines():
            print(f"  built {line}")


def section(name: str):
    def deco(fn):
        if SELECTED and not any(w in name.lower() for w in SELECTED):
            return fn
        print(f"\n=== {name} ===")
        t0 = time.perf_counter()
        try:
            fn()
        except Exception:  # noqa: BLE001 - a probe reports, it does not stop
            FAILURES.append(name)
            print(f"  !! {name} FAILED")
            traceback.print_exc(limit=6, file=sys.stdout)
        print(f"  ({time.perf_counter() - t0:.2f} s)")
        return fn

    return deco


def check(cond: bool, what: str) -> None:
    print(f"  {'ok ' if cond else 'BAD'} {what}")
    if not cond:
        FAILURES.append(what)


# ----------------------------------------------------------------------------- setup
T0 = time.perf_counter()
sglang_env.prepare_sglang_import()
T_PREPARE = time.perf_counter() - T0

import torch  # noqa: E402
from sglang.srt.runtime_context import get_context  # noqa: E402

T1 = time.perf_counter()
import sglang.srt.disaggregation.decode_schedule_batch_mixin as mixin  # noqa: E402
import sglang.srt.speculative.dspark_components.dspark_draft as dspark_draft  # noqa: E402
from sglang.kernels.ops.speculative.dflash import compute_dflash_correct_drafts_and_bonus  # noqa: E402
from sglang.kernels.ops.speculative.dspark.dspark_accept import (  # noqa: E402
    AcceptGreedy,
    CapCorrectLen,
    FinalizeAcceptLens,
)
from sglang.kernels.ops.speculative.dspark.dspark_schedule import ScheduleVerifyLensTopk  # noqa: E402
from sglang.kernels.ops.speculative.dspark.dspark_verify_window import (  # noqa: E402
    BuildOutTokens,
    BuildRaggedVerifyWindow,
    compact_row_index,
    compact_verify_ids,
    scatter_compact_to_strided,
)
from sglang.kernels.ops.speculative.ragged_verify_kernels import (  # noqa: E402
    build_qo_indptr,
    pad_verify_lens_to_bucket,
)
from sglang.srt.managers.overlap_utils import FutureMap, resolve_forward_inputs  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode  # noqa: E402
from sglang.srt.model_executor.runner.base_cuda_graph_runner import BaseCudaGraphRunner  # noqa: E402
from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner  # noqa: E402
from sglang.srt.speculative.dflash_info import DFlashVerifyInput  # noqa: E402
from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2  # noqa: E402
from sglang.srt.speculative.draft_worker_common import make_draft_block_spec_info  # noqa: E402
from sglang.srt.speculative.dspark_components.dspark_draft import DraftBlockProposer, make_next_draft_input  # noqa: E402
from sglang.srt.speculative.dspark_components.dspark_planner import DSparkScheduleConfig  # noqa: E402
from sglang.srt.speculative.dspark_components.dspark_verify import build_accept_outs  # noqa: E402
from sglang.srt.speculative.dspark_disaggregation import build_dspark_disagg_draft_input  # noqa: E402
from sglang.srt.speculative.ragged_verify import (  # noqa: E402
    RaggedVerifyLayout,
    build_capture_verify_lens,
    round_up_grid,
)
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm, spec_scale_global_num_tokens  # noqa: E402
from sglang.srt.speculative.spec_tp_sync import SpecTpSync, SpecTpSyncSite  # noqa: E402
from sglang.srt.speculative.spec_utils import spec_prepare_for_decode  # noqa: E402

T_IMPORT = time.perf_counter() - T1
CPU = torch.device("cpu")
print(f"sglang {sglang_env.SGLANG_VERSION} from {os.path.dirname(sys.modules['sglang'].__file__)}")
print(f"torch {torch.__version__}; TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')!r}")
print(f"prepare_sglang_import(): {T_PREPARE:.1f} s; DSpark module imports after it: {T_IMPORT:.1f} s")
print(f"runtime config bags: { {k: vars(v) if hasattr(v, '__dict__') else v for k, v in get_context()._config_bags.items()} }")


def make_future_map(pool_rows: int = 16, poison: bool = True) -> FutureMap:
    """A real FutureMap on CPU. Its buffers are torch.empty unless SGLANG_IS_IN_CI; poison them
    with -1 (as CI does) so that an unwritten row is visible."""
    fm = FutureMap(
        CPU,
        SpeculativeAlgorithm.DSPARK,
        SimpleNamespace(req_to_token=torch.zeros((pool_rows, 64), dtype=torch.int32)),
        needs_cpu_seq_lens=True,
    )
    if poison:
        fm.new_seq_lens_buf.fill_(-1)
        fm.output_tokens_buf.fill_(-1)
    return fm


FM_BUILT = (
    "future_map = FutureMap(torch.device('cpu'), SpeculativeAlgorithm.DSPARK, "
    "SimpleNamespace(req_to_token=torch.zeros((16, 64), dtype=torch.int32)), needs_cpu_seq_lens=True)\n"
    "  (then fm.new_seq_lens_buf.fill_(-1); fm.output_tokens_buf.fill_(-1) to make unwritten rows visible)"
)


# ----------------------------------------------------------------------------- A. disagg handoff
@section("A1-A5 build_dspark_disagg_draft_input (overlap on / off) + FutureMap resolve")
def _disagg():
    recipe(
        "sglang.srt.speculative.dspark_disaggregation.build_dspark_disagg_draft_input",
        build_dspark_disagg_draft_input,
        "batch = SimpleNamespace(enable_overlap=bool, seq_lens=int64[bs], req_pool_indices=int64[bs])\n"
        "last_tokens_tensor = int64[bs]  (each request's output_ids[-1])\n" + FM_BUILT,
    )
    last = torch.tensor([11, 22, 33], dtype=torch.int64)
    for overlap in (True, False):
        fm = make_future_map()
        b = SimpleNamespace(
            enable_overlap=overlap,
            seq_lens=torch.tensor([5, 9, 3], dtype=torch.int64),
            req_pool_indices=torch.tensor([2, 7, 4], dtype=torch.int64),
        )
        si = build_dspark_disagg_draft_input(b, last, fm)
        rows = b.req_pool_indices
        print(
            f"  overlap={overlap}: {type(si).__name__} type={si.spec_input_type.name} bonus={show(si.bonus_tokens)} "
            f"new_seq_lens={show(si.new_seq_lens)} topk_p={tuple(si.topk_p.shape)} "
            f"hidden={tuple(si.hidden_states.shape)}:{si.hidden_states.dtype} "
            f"future_indices={show(si.future_indices)} dsa_flag={si.future_dsa_topk_indices_available} "
            f"num_tokens_per_req={si.num_tokens_per_req}"
        )
        print(
            f"    relay: new_seq_lens_buf[rows]={show(fm.new_seq_lens_buf[rows])} "
            f"output_tokens_buf[rows]={show(fm.output_tokens_buf[rows])} "
            f"publish_ready={type(fm.publish_ready).__name__} _publish_fresh={getattr(fm, '_publish_fresh', None)} "
            f"need_topk={fm.need_topk} need_hidden={fm.need_hidden_states}"
        )
        check(
            isinstance(si, DFlashDraftInputV2) and si.bonus_tokens.tolist() == [11, 22, 33] and si.new_seq_lens.tolist() == [5, 9, 3],
            "A1-A3 DFlashDraftInputV2 with bonus=last, new_seq_lens=seq_lens",
        )
        if overlap:
            check(
                si.future_indices is b.req_pool_indices and si.future_dsa_topk_indices_available is False,
                "A4 future_indices is req_pool_indices, dsa flag False",
            )
            check(
                fm.new_seq_lens_buf[rows].tolist() == [5, 9, 3] and fm.output_tokens_buf[rows].tolist() == [11, 22, 33],
                "A4 published + stashed",
            )
            # A8: the first decode's resolve
            recipe(
                "FutureMap.resolve_seq_lens_cpu",
                FutureMap.resolve_seq_lens_cpu,
                "batch = SimpleNamespace(spec_info=si, req_pool_indices=rows, req_pool_indices_cpu=rows.clone(), seq_lens=None, "
                "seq_lens_cpu=None, seq_lens_sum=None)",
            )
            rb = SimpleNamespace(
                spec_info=si, req_pool_indices=rows, req_pool_indices_cpu=rows.clone(), seq_lens=None, seq_lens_cpu=None, seq_lens_sum=None
            )
            fm.resolve_seq_lens_cpu(rb)
            print(f"    -> seq_lens={show(rb.seq_lens)} seq_lens_cpu={show(rb.seq_lens_cpu)} seq_lens_sum={rb.seq_lens_sum}")
            check(
                rb.seq_lens.tolist() == rb.seq_lens_cpu.tolist() == [5, 9, 3] and rb.seq_lens_sum == 17,
                "A8 resolve_seq_lens_cpu round trip",
            )
            recipe(
                "sglang.srt.managers.overlap_utils.resolve_forward_inputs",
                resolve_forward_inputs,
                "batch = SimpleNamespace(spec_info=si, prefill_input_ids_cpu=None, input_ids=None, enable_overlap=True,\n"
                "                        spec_algorithm=SpeculativeAlgorithm.DSPARK, req_pool_indices=rows)",
            )
            si.bonus_tokens = None
            fb = SimpleNamespace(
                spec_info=si,
                prefill_input_ids_cpu=None,
                input_ids=None,
                enable_overlap=True,
                spec_algorithm=SpeculativeAlgorithm.DSPARK,
                req_pool_indices=rows,
            )
            resolve_forward_inputs(fb, fm)
            print(
                f"    -> spec_info.bonus_tokens={show(si.bonus_tokens)} dsa_topk_indices={si.dsa_topk_indices} "
                f"batch.input_ids={fb.input_ids}"
            )
            check(
                si.bonus_tokens.tolist() == [11, 22, 33] and si.dsa_topk_indices is None,
                "A8 resolve_forward_inputs gathers the stashed bonus",
            )
        else:
            check(
                si.future_indices is None
                and fm.publish_ready is None
                and (fm.new_seq_lens_buf == -1).all().item()
                and (fm.output_tokens_buf == -1).all().item(),
                "A5 overlap off: FutureMap untouched",
            )
    # dispatch through the algorithm enum
    recipe("SpeculativeAlgorithm.DSPARK.build_disagg_draft_input", SpeculativeAlgorithm.build_disagg_draft_input, "")
    si = SpeculativeAlgorithm.DSPARK.build_disagg_draft_input(
        SimpleNamespace(enable_overlap=False, seq_lens=torch.tensor([4]), req_pool_indices=torch.tensor([1])),
        torch.tensor([9]),
        make_future_map(),
    )
    check(type(si).__name__ == "DFlashDraftInputV2", "A1 enum dispatch returns DFlashDraftInputV2")
    # A6: DP idle
    fm = make_future_map()
    e = SimpleNamespace(enable_overlap=True, seq_lens=torch.empty(0, dtype=torch.int64), req_pool_indices=torch.empty(0, dtype=torch.int64))
    si = build_dspark_disagg_draft_input(e, torch.empty(0, dtype=torch.int64), fm)
    check(fm.publish_ready is None and tuple(si.bonus_tokens.shape) == (0,), "A6 empty batch: no publish, empty tensors")
    # DSA flag True -> the first resolve asserts
    fm = make_future_map()
    b = SimpleNamespace(enable_overlap=True, seq_lens=torch.tensor([5]), req_pool_indices=torch.tensor([2]))
    si = build_dspark_disagg_draft_input(b, torch.tensor([11]), fm)
    si.future_dsa_topk_indices_available = True
    try:
        fm._resolve_spec_extras(SimpleNamespace(spec_info=si))
        check(False, "A4 dsa flag True should assert at resolve")
    except AssertionError:
        check(True, "A4 dsa flag True -> AssertionError in FutureMap._resolve_spec_extras (no DSA buffer)")


@section("A7 ScheduleBatchDisaggregationDecodeMixin.process_prebuilt")
def _prebuilt():
    recipe(
        "sglang.srt.disaggregation.decode_schedule_batch_mixin.ScheduleBatchDisaggregationDecodeMixin.process_prebuilt",
        mixin.ScheduleBatchDisaggregationDecodeMixin.process_prebuilt,
        "self = SimpleNamespace(reqs=[SimpleNamespace(output_ids=[...], swa_branching_seqlen=None, grammar=None, rid=str)],\n"
        "      device='cpu', tree_cache=None, enable_overlap=bool, spec_algorithm=SpeculativeAlgorithm.DSPARK,\n"
        "      seq_lens=int64[bs], req_pool_indices=int64[bs], input_ids=<sentinel>, spec_info=None)\n"
        + FM_BUILT
        + "\nwith sglang_env.checkpoint_kv_cache_noop(): ...   (the real checkpoint_kv_cache needs a radix tree)",
    )

    def make_batch(overlap: bool, algo=SpeculativeAlgorithm.DSPARK):
        reqs = [
            SimpleNamespace(output_ids=[7, 11], swa_branching_seqlen=None, grammar=None, rid="r0"),
            SimpleNamespace(output_ids=[5, 6, 22], swa_branching_seqlen=4, grammar=None, rid="r1"),
        ]
        return SimpleNamespace(
            reqs=reqs,
            device="cpu",
            tree_cache=None,
            enable_overlap=overlap,
            spec_algorithm=algo,
            seq_lens=torch.tensor([12, 20]),
            req_pool_indices=torch.tensor([3, 9]),
            input_ids="SENTINEL",
            spec_info=None,
        )

    with sglang_env.checkpoint_kv_cache_noop():
        for overlap in (True, False):
            fm = make_future_map()
            b = make_batch(overlap)
            mixin.ScheduleBatchDisaggregationDecodeMixin.process_prebuilt(b, fm)
            si = b.spec_info
            print(
                f"  overlap={overlap}: spec_info={type(si).__name__} bonus={show(si.bonus_tokens)} new_seq_lens={show(si.new_seq_lens)} "
                f"future_indices={show(si.future_indices)} input_ids={b.input_ids!r} "
                f"req1.swa_branching_seqlen={b.reqs[1].swa_branching_seqlen}"
            )
            print(
                f"    relay rows: output_tokens={show(fm.output_tokens_buf[b.req_pool_indices])} "
                f"new_seq_lens={show(fm.new_seq_lens_buf[b.req_pool_indices])}"
            )
            check(
                si.bonus_tokens.tolist() == [11, 22] and si.new_seq_lens.tolist() == [12, 20], f"A2/A3 process_prebuilt overlap={overlap}"
            )
            check(b.input_ids == "SENTINEL", "A7 spec branch leaves input_ids alone")
        # non-spec branch for comparison
        fm = SimpleNamespace(
            stash=lambda idx, payload: print(f"    non-spec stash({show(idx)}, RelayPayload(bonus_tokens={show(payload.bonus_tokens)}))")
        )
        b = make_batch(True, SpeculativeAlgorithm.NONE)
        mixin.ScheduleBatchDisaggregationDecodeMixin.process_prebuilt(b, fm)
        check(b.spec_info is None and b.input_ids is None, "A7 non-spec branch: stash bonus, input_ids=None")
        # pre-fix shape: builder returns None -> first decode crashes
        orig = SpeculativeAlgorithm.build_disagg_draft_input
        SpeculativeAlgorithm.build_disagg_draft_input = lambda self, *a: None
        try:
            b = make_batch(True)
            mixin.ScheduleBatchDisaggregationDecodeMixin.process_prebuilt(b, make_future_map())
            try:
                spec_prepare_for_decode(b)
                check(False, "pre-fix shape should crash")
            except AttributeError as exc:
                check("prepare_for_decode" in str(exc), f"A1 pre-fix shape: spec_prepare_for_decode -> AttributeError: {exc}")
        finally:
            SpeculativeAlgorithm.build_disagg_draft_input = orig
    # without the patch
    try:
        mixin.ScheduleBatchDisaggregationDecodeMixin.process_prebuilt(make_batch(False), make_future_map())
        print("  without checkpoint_kv_cache_noop: ran")
    except Exception as exc:  # noqa: BLE001
        print(f"  without checkpoint_kv_cache_noop: {type(exc).__name__}: {exc}")


# ----------------------------------------------------------------------------- B/C. DP metadata
def make_proposer(dp_moe_sync: bool, nt_enabled: bool, q: int = 6) -> DraftBlockProposer:
    p = DraftBlockProposer.__new__(DraftBlockProposer)
    p._dp_moe_sync = dp_moe_sync
    p.draft_model_runner = SimpleNamespace(device=CPU)
    p._draft_block_spec_info = make_draft_block_spec_info(draft_token_num=q, device=CPU)
    p._num_token_non_padded = torch.empty((1,), dtype=torch.int32) if nt_enabled else None
    return p


def make_forward_batch(bs: int = 3, width: int = 6, spec_info=None) -> ForwardBatch:
    n = bs * width
    z = torch.zeros(n, dtype=torch.int64)
    return ForwardBatch(
        forward_mode=ForwardMode.TARGET_VERIFY,
        batch_size=bs,
        input_ids=z,
        req_pool_indices=torch.arange(bs),
        seq_lens=torch.full((bs,), 10),
        out_cache_loc=z,
        seq_lens_sum=10 * bs,
        spec_algorithm=SpeculativeAlgorithm.DSPARK,
        spec_info=spec_info if spec_info is not None else make_draft_block_spec_info(draft_token_num=width, device=CPU),
    )


def sched_batch(gnt=(1, 3, 0, 2), coord=False, can_graph=True, extend=False, draft_gnt=None):
    lst = None if gnt is None else list(gnt)
    return SimpleNamespace(
        global_num_tokens=lst,
        global_num_tokens_for_logprob=None if gnt is None else list(gnt),
        draft_global_num_tokens=draft_gnt,
        draft_global_num_tokens_for_logprob=draft_gnt,
        can_run_decode_cuda_graph=can_graph,
        can_run_dp_draft_cuda_graph=False,
        is_extend_in_batch=extend,
        dp_spec_prefill_coordination_applied=coord,
    )


def fb_state(f: ForwardBatch) -> dict:
    # NB: num_token_non_padded_cpu is not a declared ForwardBatch field in 0.5.23; only
    # _fill_dp_moe_sync_metadata sets it (as an ad-hoc attribute), hence the getattr.
    return dict(
        orig=f.original_global_num_tokens_cpu,
        gnt_cpu=f.global_num_tokens_cpu,
        gnt_gpu=show(f.global_num_tokens_gpu),
        gnt_lp_cpu=f.global_num_tokens_for_logprob_cpu,
        ntnp=show(f.num_token_non_padded),
        ntnp_cpu=getattr(f, "num_token_non_padded_cpu", "<unset>"),
        gntnp=show(f.global_num_token_non_padded),
        gntnp_cpu=f.global_num_token_non_padded_cpu,
        can_run_decode_cg=f.can_run_decode_cuda_graph,
        can_run_dp_draft_cg=f.can_run_dp_draft_cuda_graph,
        is_extend=f.is_extend_in_batch,
        coord=f.dp_spec_prefill_coordination_applied,
    )


@section("B DraftBlockProposer.__new__ + _fill_dp_moe_sync_metadata")
def _fill():
    recipe(
        "sglang.srt.speculative.dspark_components.dspark_draft.DraftBlockProposer._fill_dp_moe_sync_metadata",
        DraftBlockProposer._fill_dp_moe_sync_metadata,
        "p = DraftBlockProposer.__new__(DraftBlockProposer); p._dp_moe_sync = bool; p.draft_model_runner = SimpleNamespace(device=cpu)\n"
        "p._draft_block_spec_info = make_draft_block_spec_info(draft_token_num=Q, device=cpu)   # Q = query_token_num\n"
        "p._num_token_non_padded = torch.empty((1,), dtype=torch.int32) if enabled else None\n"
        "forward_batch = ForwardBatch(forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs, input_ids=int64[bs*Q], "
        "req_pool_indices=arange(bs),\n"
        "    seq_lens=int64[bs], out_cache_loc=int64[bs*Q], seq_lens_sum=int, spec_algorithm=SpeculativeAlgorithm.DSPARK, "
        "spec_info=<draft block spec>)\n"
        "batch = SimpleNamespace(global_num_tokens=list|None, global_num_tokens_for_logprob=list|None, can_run_decode_cuda_graph=bool,\n"
        "    is_extend_in_batch=bool, dp_spec_prefill_coordination_applied=bool)\n"
        "with sglang_env.num_token_non_padded(enabled): ...   (patches dspark_draft.enable_num_token_non_padded)",
    )
    cases = [
        ("dp_moe_sync, scaled", True, True, sched_batch()),
        ("dp_moe_sync, coordination applied", True, True, sched_batch(gnt=(0, 18, 12, 6), coord=True, can_graph=False, extend=True)),
        ("no dp_moe_sync (early return)", False, True, sched_batch()),
        ("global_num_tokens None (early return)", True, True, sched_batch(gnt=None)),
        ("dp_moe_sync, non-padded disabled", True, False, sched_batch()),
    ]
    results = {}
    for name, dp, nt, b in cases:
        with sglang_env.num_token_non_padded(nt):
            f = make_forward_batch()
            make_proposer(dp, nt)._fill_dp_moe_sync_metadata(f, b)
        results[name] = (f, b)
        print(f"  {name}: {fb_state(f)}")
    f, b = results["dp_moe_sync, scaled"]
    check(
        f.original_global_num_tokens_cpu is b.global_num_tokens
        and f.global_num_tokens_cpu == [6, 18, 0, 12]
        and f.global_num_tokens_gpu.tolist() == [6, 18, 0, 12]
        and f.global_num_tokens_gpu.dtype == torch.int64,
        "B3 raw counts kept, scaled by Q=6",
    )
    check(
        f.num_token_non_padded.tolist() == [18]
        and f.global_num_token_non_padded.dim() == 0
        and f.global_num_token_non_padded.dtype == torch.int32,
        "B1/B3 local [1] buffer filled with bs*Q, global 0-d int32",
    )
    f, _ = results["dp_moe_sync, coordination applied"]
    check(
        f.global_num_tokens_cpu == [0, 18, 12, 6] and f.can_run_decode_cuda_graph is False and f.is_extend_in_batch is True,
        "B4 unscaled under coordination",
    )
    f, _ = results["no dp_moe_sync (early return)"]
    check(
        f.original_global_num_tokens_cpu is None
        and f.global_num_tokens_cpu is None
        and f.can_run_decode_cuda_graph is True
        and f.num_token_non_padded_cpu == 18,
        "B1/B2 early return still copies graph flags + non-padded count",
    )
    f, _ = results["dp_moe_sync, non-padded disabled"]
    check(
        f.num_token_non_padded is None and f.global_num_token_non_padded is None and f.num_token_non_padded_cpu == 18,
        "B1 disabled: no GPU counts",
    )
    check("can_run_dp_cuda_graph" not in ForwardBatch.__dataclass_fields__, "0.5.23 has no ForwardBatch.can_run_dp_cuda_graph")
    # B6: idle rank
    with sglang_env.num_token_non_padded(True):
        f = make_forward_batch(bs=0)
        make_proposer(True, True)._fill_dp_moe_sync_metadata(f, sched_batch())
    print(f"  idle rank (bs=0): {fb_state(f)}")
    check(f.num_token_non_padded_cpu == 0 and f.global_num_tokens_cpu == [6, 18, 0, 12], "B6 idle rank still describes its peers")


@section("C spec_scale_global_num_tokens + ForwardBatch.init_mlp_sync_metadata")
def _scale():
    recipe(
        "sglang.srt.speculative.spec_info.spec_scale_global_num_tokens",
        spec_scale_global_num_tokens,
        "spec_info: anything with num_tokens_per_req / num_tokens_for_logprob_per_req, e.g.\n"
        "  make_draft_block_spec_info(draft_token_num=Q, device=cpu)  (Q, Q);  DFlashVerifyInput(draft_token=None, positions=None, "
        "draft_token_num=T)  (T, T);\n"
        "  make_next_draft_input(bonus_tokens=..., new_seq_lens=...)  (1, 1)",
    )
    draft_block = make_draft_block_spec_info(draft_token_num=6, device=CPU)
    verify = DFlashVerifyInput(draft_token=None, positions=None, draft_token_num=8)
    draft_state = make_next_draft_input(bonus_tokens=torch.tensor([1, 2]), new_seq_lens=torch.tensor([3, 4]))
    for name, si in (("draft block Q=6", draft_block), ("verify T=8", verify), ("draft state", draft_state)):
        out = spec_scale_global_num_tokens(si, [1, 3, 0, 2], [1, 3, 0, 2])
        print(f"  {name}: per_req={si.num_tokens_per_req} -> {out}")
    check(spec_scale_global_num_tokens(draft_block, [1, 3, 0, 2], [1, 3, 0, 2]) == ([6, 18, 0, 12], [6, 18, 0, 12]), "C1 scale by Q")
    recipe(
        "sglang.srt.model_executor.forward_batch_info.ForwardBatch.init_mlp_sync_metadata",
        ForwardBatch.init_mlp_sync_metadata,
        "batch = SimpleNamespace(dp_spec_prefill_coordination_applied, global_num_tokens, global_num_tokens_for_logprob,\n"
        "    draft_global_num_tokens, draft_global_num_tokens_for_logprob, can_run_decode_cuda_graph, can_run_dp_draft_cuda_graph)\n"
        "forward_batch = ForwardBatch(... spec_info=DFlashVerifyInput(draft_token=None, positions=None, draft_token_num=T))",
    )
    cases = [
        ("verify T=8", verify, sched_batch(), {}),
        ("coordination applied", verify, sched_batch(gnt=(0, 18, 12, 6), coord=True), {}),
        ("draft worker, draft counts", draft_block, sched_batch(draft_gnt=[2, 2, 1, 0]), dict(is_draft_worker=True)),
        ("source None (early return)", verify, sched_batch(gnt=None), {}),
        ("spec_info None (no scaling)", None, sched_batch(), {}),
    ]
    for name, si, b, kw in cases:
        f = make_forward_batch(width=8, spec_info=si if si is not None else verify)
        if si is None:
            f.spec_info = None
        f.init_mlp_sync_metadata(b, "cpu", **kw)
        print(f"  {name}: {fb_state(f)}")
        if name == "verify T=8":
            check(
                f.original_global_num_tokens_cpu == [1, 3, 0, 2] and f.global_num_tokens_cpu == [8, 24, 0, 16], "C2 scaled by T, raw kept"
            )
    # differential: B3 fill vs C2 init for the same draft block
    with sglang_env.num_token_non_padded(False):
        f1 = make_forward_batch()
        make_proposer(True, False)._fill_dp_moe_sync_metadata(f1, sched_batch())
    f2 = make_forward_batch()
    f2.init_mlp_sync_metadata(sched_batch(), "cpu")
    check(
        f1.global_num_tokens_cpu == f2.global_num_tokens_cpu and f1.original_global_num_tokens_cpu == f2.original_global_num_tokens_cpu,
        "B3 == C2 on the same inputs",
    )


# ----------------------------------------------------------------------------- D. accept + finalize
@section("D greedy accept + finalize (torch paths)")
def _accept():
    bs, gamma, V = 3, 4, 11
    T = gamma + 1
    cand = torch.tensor([[9, 1, 2, 3, 4], [9, 1, 2, 3, 4], [9, 5, 5, 5, 5]])
    pred = torch.tensor([[1, 2, 3, 4, 7], [1, 2, 0, 4, 8], [0, 5, 5, 5, 5]])
    logits = torch.full((bs * T, V), -5.0)
    logits[torch.arange(bs * T), pred.reshape(-1)] = 5.0
    built = (
        "candidates = int64[bs, T] (col 0 = anchor, cols 1.. = drafts); target_logits = float32[bs*T, V];\n"
        "verify_num_draft_tokens = T; cutoff_verify_lens = int32[bs] or None.  bs=3 gamma=4 T=5 V=11"
    )
    recipe(
        "sglang.kernels.ops.speculative.dspark.dspark_accept.AcceptGreedy.execute  (-> .torch on CPU tensors)", AcceptGreedy.torch, built
    )
    cl, bonus, trim = AcceptGreedy.execute(candidates=cand, target_logits=logits, verify_num_draft_tokens=T)
    print(f"  AcceptGreedy: correct_len={show(cl)} bonus={show(bonus)} cap_trim={show(trim)}")
    check(cl.tolist() == [4, 2, 0] and bonus.tolist() == [7, 0, 0], "D1 greedy accept")
    recipe(
        "sglang.kernels.ops.speculative.dflash.compute_dflash_correct_drafts_and_bonus",
        compute_dflash_correct_drafts_and_bonus,
        "target_predict = argmax(target_logits).view(bs, T)",
    )
    cl0, b0 = compute_dflash_correct_drafts_and_bonus(candidates=cand, target_predict=pred)
    print(f"  compute_dflash_correct_drafts_and_bonus: {show(cl0)} {show(b0)}")
    vl = torch.tensor([2, 5, 1], dtype=torch.int32)
    cl2, bonus2, trim2 = AcceptGreedy.execute(candidates=cand, target_logits=logits, verify_num_draft_tokens=T, cutoff_verify_lens=vl)
    print(f"  AcceptGreedy cutoff {vl.tolist()}: correct_len={show(cl2)} bonus={show(bonus2)} cap_trim={show(trim2)}")
    check(cl2.tolist() == [1, 2, 0] and bonus2.tolist() == [2, 0, 0] and trim2.tolist() == [3, 0, 0], "D4 cutoff by verify_lens")
    recipe("sglang.kernels.ops.speculative.dspark.dspark_accept.CapCorrectLen.execute", CapCorrectLen.torch, "")
    print(f"  CapCorrectLen: {show(CapCorrectLen.execute(correct_len=cl, verify_lens=vl))}")
    recipe(
        "sglang.kernels.ops.speculative.dspark.dspark_accept.FinalizeAcceptLens.execute",
        FinalizeAcceptLens.torch,
        "prefix_lens = int64[bs] (committed KV length before the step)",
    )
    fin = FinalizeAcceptLens.execute(correct_len=cl2, cap_trim_lens=trim2, prefix_lens=torch.tensor([10, 20, 30]))
    print(
        f"  FinalizeAcceptLens -> FinalizeAcceptLensResult(commit_lens={show(fin.commit_lens)}, new_seq_lens={show(fin.new_seq_lens)}, "
        f"cap_trim_lens={show(fin.cap_trim_lens)})"
    )
    check(
        fin.commit_lens.tolist() == [2, 3, 1] and fin.new_seq_lens.tolist() == [12, 23, 31],
        "D2 commit = correct+1, new_seq = prefix+commit",
    )
    recipe(
        "sglang.kernels.ops.speculative.dspark.dspark_verify_window.BuildOutTokens.execute",
        BuildOutTokens.torch,
        "draft_tokens = int64[bs, gamma]",
    )
    out = BuildOutTokens.execute(draft_tokens=cand[:, 1:], correct_len=cl2, bonus=bonus2, verify_num_draft_tokens=T, gamma=gamma)
    print(f"  BuildOutTokens: {show(out)}")
    check(
        all(out[r, : int(fin.commit_lens[r])].tolist() == cand[r, 1 : int(cl2[r]) + 1].tolist() + [int(bonus2[r])] for r in range(bs)),
        "D3 out_tokens prefix",
    )
    recipe(
        "sglang.srt.speculative.dspark_components.dspark_verify.build_accept_outs",
        build_accept_outs,
        "tp_sync = SpecTpSync(SimpleNamespace(world_size=1, rank_in_group=0)); sync_site = SpecTpSyncSite.DSPARK_ACCEPT_GREEDY",
    )
    acc = build_accept_outs(
        correct_len=cl2,
        bonus=bonus2,
        cap_trim_lens=trim2,
        prefix_lens=torch.tensor([10, 20, 30]),
        draft_tokens=cand[:, 1:],
        gamma=gamma,
        verify_num_draft_tokens=T,
        tp_sync=SpecTpSync(SimpleNamespace(world_size=1, rank_in_group=0)),
        sync_site=SpecTpSyncSite.DSPARK_ACCEPT_GREEDY,
    )
    print(f"  build_accept_outs -> {type(acc).__name__}(" + ", ".join(f"{k}={show(getattr(acc, k))}" for k in acc.__struct_fields__) + ")")
    check(acc.commit_lens.tolist() == [2, 3, 1] and acc.out_tokens.tolist() == out.tolist(), "D2/D3 build_accept_outs agrees")


# ----------------------------------------------------------------------------- G. verify-length scheduler
@section("G ScheduleVerifyLensTopk (verify-length scheduler, torch path)")
def _schedule():
    recipe(
        "sglang.kernels.ops.speculative.dspark.dspark_schedule.ScheduleVerifyLensTopk.execute",
        ScheduleVerifyLensTopk.torch,
        "confidence = float32[bs, gamma] in [0,1]; budget = int; cfg = DSparkScheduleConfig(gamma=4, min_verify_len=1, max_verify_len=0, "
        "survival_eps=1e-6)\n"
        "  (DSparkScheduleConfig lives in sglang.srt.speculative.dspark_components.dspark_planner)",
    )
    conf = torch.tensor([[0.9, 0.8, 0.1, 0.5], [0.2, 0.9, 0.9, 0.9], [0.99, 0.99, 0.99, 0.99]])
    cfg = DSparkScheduleConfig(gamma=4)
    cfg.validate()
    for budget in (0, 3, 5, 100):
        vl = ScheduleVerifyLensTopk.execute(confidence=conf, budget=budget, cfg=cfg)
        print(f"  budget={budget}: verify_lens={show(vl)}")
        check(int((vl - 1).sum()) <= budget and vl.dtype == torch.int32, f"G1 budget {budget} respected")
    vl = ScheduleVerifyLensTopk.execute(confidence=conf, budget=5, cfg=DSparkScheduleConfig(gamma=4, min_verify_len=2, max_verify_len=4))
    print(f"  min=2 max=4 budget=5: {show(vl)}")


# ----------------------------------------------------------------------------- F. compact layout
@section("F compact / ragged layout functions")
def _layout():
    bs, T = 3, 5
    recipe(
        "sglang.srt.speculative.ragged_verify.RaggedVerifyLayout.from_verify_lens",
        RaggedVerifyLayout.from_verify_lens,
        "verify_lens_cpu = [2, 5, 1]; device = 'cpu'; grid = captured token buckets [4, 8, 12, 16]",
    )
    lay = RaggedVerifyLayout.from_verify_lens(verify_lens_cpu=[2, 5, 1], device="cpu", grid=[4, 8, 12, 16])
    print(
        f"  layout: verify_lens={show(lay.verify_lens)} graph_num_tokens={lay.graph_num_tokens} qo_indptr={show(lay.qo_indptr_device)} "
        f"extend_start_loc={show(lay.extend_start_loc)} total={lay.total_verify_tokens} cap={lay.cap}"
    )
    recipe("RaggedVerifyLayout.padded_to_bucket", RaggedVerifyLayout.padded_to_bucket, "")
    pad = lay.padded_to_bucket(padded_bs=4)
    print(
        f"  padded_to_bucket(padded_bs=4): verify_lens={show(pad.verify_lens)} total={pad.total_verify_tokens} graph={pad.graph_num_tokens}"
    )
    check(pad.verify_lens.tolist() == [2, 5, 1, 0], "F6 pad row can get length 0")
    recipe("sglang.kernels.ops.speculative.ragged_verify_kernels.pad_verify_lens_to_bucket", pad_verify_lens_to_bucket, "")
    print(
        "  pad_verify_lens_to_bucket(graph=12, bs=3, padded_bs=5): "
        f"{show(pad_verify_lens_to_bucket(verify_lens=lay.verify_lens, graph_num_tokens=12, bs=3, padded_bs=5))}"
        f"  (padded_bs=3): {show(pad_verify_lens_to_bucket(verify_lens=lay.verify_lens, graph_num_tokens=12, bs=3, padded_bs=3))}"
    )
    recipe("sglang.kernels.ops.speculative.ragged_verify_kernels.build_qo_indptr", build_qo_indptr, "")
    q = build_qo_indptr(verify_lens=lay.verify_lens)
    print(f"  build_qo_indptr -> qo_indptr={show(q.qo_indptr)} extend_start_loc={show(q.extend_start_loc)}")
    recipe("sglang.kernels.ops.speculative.dspark.dspark_verify_window.compact_row_index", compact_row_index, "")
    req, within, valid = compact_row_index(verify_lens=lay.verify_lens, padded_total=lay.graph_num_tokens, device="cpu")
    print(f"  compact_row_index: req={show(req)} within={show(within)} valid={show(valid)}")
    check(req.tolist() == [0, 0, 1, 1, 1, 1, 1, 2] and within.tolist() == [0, 1, 0, 1, 2, 3, 4, 0], "F2 row map")
    recipe(
        "sglang.kernels.ops.speculative.dspark.dspark_verify_window.compact_verify_ids",
        compact_verify_ids,
        "draft_block_ids = int64[bs, Q] (col 0 = anchor); draft_tokens = int64[bs, gamma]",
    )
    cand = torch.tensor([[9, 1, 2, 3, 4], [8, 1, 2, 3, 4], [7, 5, 5, 5, 5]])
    ids = compact_verify_ids(draft_block_ids=cand[:, :1].repeat(1, 4), draft_tokens=cand[:, 1:], layout=lay, device="cpu")
    print(f"  compact_verify_ids: {show(ids)}")
    check(ids.tolist() == [9, 1, 8, 1, 2, 3, 4, 7], "F2 packed ids")
    recipe(
        "sglang.kernels.ops.speculative.dspark.dspark_verify_window.scatter_compact_to_strided",
        scatter_compact_to_strided,
        "compact = [graph_num_tokens, D] rows in packed order",
    )
    comp = torch.arange(lay.graph_num_tokens, dtype=torch.float32).view(-1, 1)
    strided = scatter_compact_to_strided(compact=comp, layout=lay, fill_value=-1.0, verify_num_draft_tokens=T)
    print(f"  scatter_compact_to_strided -> [bs*T, 1] viewed [bs, T]: {strided.view(bs, T).tolist()}")
    check(strided.view(bs, T).tolist() == [[0, 1, -1, -1, -1], [2, 3, 4, 5, 6], [7, -1, -1, -1, -1]], "F3 scatter back")
    print(
        f"  round_up_grid(9, [4, 8, 12]) = {round_up_grid(9, [4, 8, 12])}; "
        "build_capture_verify_lens(num_tokens=10, num_slots=3, num_draft_tokens=5) = "
        f"{build_capture_verify_lens(num_tokens=10, num_slots=3, num_draft_tokens=5)}"
    )
    recipe(
        "sglang.kernels.ops.speculative.dspark.dspark_verify_window.BuildRaggedVerifyWindow.execute  (-> build_ragged_verify_window)",
        BuildRaggedVerifyWindow.torch,
        "batch = SimpleNamespace(seq_lens=int64[bs], req_pool_indices=int64[bs]); model_runner = "
        "SimpleNamespace(req_to_token_pool=SimpleNamespace(req_to_token=int32[P, L]))",
    )
    r2t = torch.arange(8 * 32, dtype=torch.int32).view(8, 32) + 1000
    win_kw = dict(
        batch=SimpleNamespace(seq_lens=torch.tensor([3, 6, 1]), req_pool_indices=torch.tensor([1, 4, 2])),
        layout=lay,
        draft_block_ids=cand[:, :1].repeat(1, 4),
        draft_tokens=cand[:, 1:],
        bs=bs,
        device="cpu",
        verify_num_draft_tokens=T,
        model_runner=SimpleNamespace(req_to_token_pool=SimpleNamespace(req_to_token=r2t)),
    )
    try:
        BuildRaggedVerifyWindow.execute(**win_kw)
        print("  build_ragged_verify_window on CPU: ran unpatched")
    except Exception as exc:  # noqa: BLE001 - expected: see below
        print(
            f"  build_ragged_verify_window on CPU, unpatched: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}\n"
            "    (cache_locs.assign_extend_cache_locs_func returns None off CUDA/NPU unless SGLANG_USE_CPU_ENGINE=1,\n"
            "     which then needs sgl_kernel's assign_extend_cache_locs_cpu; not installed)"
        )

    def torch_extend_cache_locs(req_pool_indices, req_to_token, start_offset, end_offset, batch_size, draft_token_num, device):
        # torch twin of the Triton assign_extend_cache_locs: rows packed back to back, zeros after.
        out = torch.zeros(batch_size * draft_token_num, dtype=torch.int64, device=device)
        chunks = [req_to_token[int(r), int(s) : int(e)].to(torch.int64) for r, s, e in zip(req_pool_indices, start_offset, end_offset)]
        packed = torch.cat(chunks) if chunks else out[:0]
        out[: packed.numel()] = packed
        return out

    import sglang.kernels.ops.speculative.dspark.dspark_verify_window as dvw

    orig_fn = dvw.assign_extend_cache_locs_func
    dvw.assign_extend_cache_locs_func = torch_extend_cache_locs
    try:
        print("  with dspark_verify_window.assign_extend_cache_locs_func patched to a torch twin:")
        win = BuildRaggedVerifyWindow.execute(**win_kw)
        print(
            f"    RaggedVerifyWindow(positions={show(win.positions)}, verify_cache_loc={show(win.verify_cache_loc)},\n"
            f"                       verify_ids={show(win.verify_ids)}, window_index={show(win.window_index)})"
        )
        check(
            win.positions.tolist() == [3, 4, 6, 7, 8, 9, 10, 1]
            and win.verify_cache_loc.tolist() == [1035, 1036, 1134, 1135, 1136, 1137, 1138, 1065]
            and win.window_index.tolist() == [0, 1, 5, 6, 7, 8, 9, 10],
            "E2/F2 ragged window positions = prefix+within, locs = req_to_token[req, prefix+within]",
        )
    finally:
        dvw.assign_extend_cache_locs_func = orig_fn


# ----------------------------------------------------------------------------- H. graph buckets
@section("H graph bucket helpers")
def _buckets():
    recipe(
        "sglang.srt.model_executor.runner.base_cuda_graph_runner.BaseCudaGraphRunner._pad_to_bucket  (staticmethod)",
        BaseCudaGraphRunner._pad_to_bucket,
        "buckets = sorted captured sizes",
    )
    got = [BaseCudaGraphRunner._pad_to_bucket(x, [1, 2, 4, 8, 16]) for x in (1, 3, 8, 9, 16)]
    print(f"  _pad_to_bucket(x, [1,2,4,8,16]) for x in (1,3,8,9,16): {got}")
    check(got == [1, 4, 8, 16, 16], "H2 smallest bucket >= raw")
    try:
        BaseCudaGraphRunner._pad_to_bucket(17, [1, 2, 4, 8, 16])
        check(False, "H2 raw > max should assert")
    except AssertionError as exc:
        print(f"  _pad_to_bucket(17, ...): AssertionError: {exc}")
    recipe(
        "sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner._max_dp_batch_size  (staticmethod)",
        DecodeCudaGraphRunner._max_dp_batch_size,
        "forward_batch = anything with .original_global_num_tokens_cpu (SimpleNamespace or ForwardBatch)",
    )
    print(
        "  _max_dp_batch_size(orig=[1,3,0,2]) = "
        f"{DecodeCudaGraphRunner._max_dp_batch_size(SimpleNamespace(original_global_num_tokens_cpu=[1, 3, 0, 2]))}"
    )
    try:
        DecodeCudaGraphRunner._max_dp_batch_size(SimpleNamespace(original_global_num_tokens_cpu=None))
        check(False, "H _max_dp_batch_size(None) should raise")
    except RuntimeError as exc:
        print(f"  _max_dp_batch_size(orig=None): RuntimeError: {exc}")
    # end-to-end B3 -> H: the filled ForwardBatch picks the bucket from raw counts
    with sglang_env.num_token_non_padded(False):
        f = make_forward_batch()
        make_proposer(True, False)._fill_dp_moe_sync_metadata(f, sched_batch())
    raw = DecodeCudaGraphRunner._max_dp_batch_size(f)
    check(
        raw == 3 and BaseCudaGraphRunner._pad_to_bucket(raw, [1, 2, 4, 8]) == 4,
        "B3->H bucket from raw request counts (3 -> 4), not from bs*Q",
    )


# ----------------------------------------------------------------------------- Triton under the interpreter
@section("T Triton kernels on CPU tensors (needs TRITON_INTERPRET=1 before import)")
def _triton_interpret():
    # `.execute` routes CPU tensors to `.torch`; calling `.triton` directly with CPU tensors works only
    # when TRITON_INTERPRET=1 was set before sglang was imported (the repo's conftest.py sets it when
    # there is no GPU). Without it every launch raises "0 active drivers ([]). There should only be one."
    from sglang.kernels.ops.speculative.dspark.dspark_accept import AcceptSampling
    from sglang.kernels.ops.speculative.dspark.dspark_verify_window import compact_row_index_triton

    if os.environ.get("TRITON_INTERPRET") != "1":
        print("  skipped: run with TRITON_INTERPRET=1 to execute the Triton variants on CPU")
        return
    bs, gamma, V = 3, 4, 11
    T = gamma + 1
    cand = torch.tensor([[9, 1, 2, 3, 4], [9, 1, 2, 3, 4], [9, 5, 5, 5, 5]])
    pred = torch.tensor([[1, 2, 3, 4, 7], [1, 2, 0, 4, 8], [0, 5, 5, 5, 5]])
    logits = torch.full((bs * T, V), -5.0)
    logits[torch.arange(bs * T), pred.reshape(-1)] = 5.0
    vl = torch.tensor([2, 5, 1], dtype=torch.int32)
    kw = dict(candidates=cand, target_logits=logits, verify_num_draft_tokens=T, cutoff_verify_lens=vl)
    a, b = AcceptGreedy.triton(**kw), AcceptGreedy.torch(**kw)
    print(f"  AcceptGreedy.triton: {show(a)}")
    check(all(torch.equal(x, y) for x, y in zip(a, b)), "AcceptGreedy triton == torch")
    kw = dict(correct_len=a[0], cap_trim_lens=a[2], prefix_lens=torch.tensor([10, 20, 30]))
    fa, fb = FinalizeAcceptLens.triton(**kw), FinalizeAcceptLens.torch(**kw)
    check(
        all(torch.equal(getattr(fa, k), getattr(fb, k)) for k in ("commit_lens", "new_seq_lens", "cap_trim_lens")),
        "FinalizeAcceptLens triton == torch",
    )
    kw = dict(draft_tokens=cand[:, 1:].contiguous(), correct_len=a[0], bonus=a[1], verify_num_draft_tokens=T, gamma=gamma)
    check(torch.equal(BuildOutTokens.triton(**kw), BuildOutTokens.torch(**kw)), "BuildOutTokens triton == torch")
    conf = torch.tensor([[0.9, 0.8, 0.1, 0.5], [0.2, 0.9, 0.9, 0.9], [0.99, 0.99, 0.99, 0.99]])
    for budget in (0, 3, 5, 100):
        kw = dict(confidence=conf, budget=budget, cfg=DSparkScheduleConfig(gamma=gamma))
        check(
            torch.equal(ScheduleVerifyLensTopk.triton(**kw), ScheduleVerifyLensTopk.torch(**kw)),
            f"ScheduleVerifyLensTopk triton == torch (budget {budget})",
        )
    r1 = compact_row_index_triton(verify_lens=vl, padded_total=8, device="cpu")
    r2 = compact_row_index(verify_lens=vl, padded_total=8, device="cpu")
    check(all(torch.equal(x, y) for x, y in zip(r1, r2)), "compact_row_index triton == torch")
    recipe(
        "sglang.kernels.ops.speculative.dspark.dspark_accept.AcceptSampling.execute  (Triton chain kernel; CPU only via the interpreter)",
        AcceptSampling.execute,
        "sampling_info = SimpleNamespace(need_top_k_sampling=False, need_top_p_sampling=False, temperatures=float32[bs, 1],\n"
        "    is_all_greedy=False, is_any_greedy=False); draft_probs = float32[bs, gamma, V];\n"
        "draft_input = SimpleNamespace(max_top_k=1, uniform_top_k_value=None)",
    )
    out = AcceptSampling.execute(
        candidates=cand,
        target_logits=logits,
        draft_probs=torch.full((bs, gamma, V), 1.0 / V),
        sampling_info=SimpleNamespace(
            need_top_k_sampling=False, need_top_p_sampling=False, temperatures=torch.ones(bs, 1), is_all_greedy=False, is_any_greedy=False
        ),
        draft_input=SimpleNamespace(max_top_k=1, uniform_top_k_value=None),
        gamma=gamma,
        verify_num_draft_tokens=T,
    )
    print(f"  AcceptSampling (uniform draft, near one-hot target): correct_len, bonus, cap_trim = {show(out)}")


# ----------------------------------------------------------------------------- sglang_env self-check
@section("sglang_env patches restore")
def _env():
    import sglang.srt.mem_cache.common as mc

    check(
        dspark_draft.enable_num_token_non_padded.__module__ == "sglang.srt.model_executor.forward_batch_info",
        "enable_num_token_non_padded restored",
    )
    check(mixin.checkpoint_kv_cache is mc.checkpoint_kv_cache, "checkpoint_kv_cache restored")
    check(sglang_env.torchvision_stand_in_installed(), "torchvision stand-in installed once")
    n = sum(1 for f_ in sys.meta_path if getattr(f_, "sglang_env_torchvision_stand_in", False))
    sglang_env.prepare_sglang_import()
    check(
        n == 1 and sum(1 for f_ in sys.meta_path if getattr(f_, "sglang_env_torchvision_stand_in", False)) == 1,
        "prepare_sglang_import idempotent",
    )


print(f"\n{'ALL OK' if not FAILURES else 'FAILURES: ' + '; '.join(FAILURES)}  (total {time.perf_counter() - T0:.1f} s)")
sys.exit(1 if FAILURES else 0)
