"""The historical DSpark bugs, put back into the real SGLang code, are caught by the contracts.

Runs only where sglang 0.5.23 is installed (`bash scripts/install_sglang.sh`).
Each case patches SGLang itself (never the adapter) to re-create a bug as it
shipped, runs the matching contract against the sglang adapter, and checks the
violation names the contract and engine, carries a shrunk case and a repro line.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from contracts.engines import load_engine
from contracts.registry import all_contracts
from contracts.runner import run_contract
from contracts.violation import ContractViolation
from tests.caught import assert_caught, guarded_patches

ROOT = Path(__file__).resolve().parents[2]


def _dispatch_falls_through(mp):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    real = SpeculativeAlgorithm.build_disagg_draft_input

    def build(self, batch, last_tokens_tensor, future_map):
        return None if self.is_dspark() else real(self, batch, last_tokens_tensor, future_map)

    mp.setattr(SpeculativeAlgorithm, "build_disagg_draft_input", build)


def _stash_skipped(mp):
    from sglang.srt.managers.overlap_utils import FutureMap

    mp.setattr(FutureMap, "stash", lambda self, indices, payload, *args, **kwargs: None)


def _fill_edit(edit):
    def patch(mp):
        from sglang.srt.speculative.dspark_components.dspark_draft import DraftBlockProposer

        real = DraftBlockProposer._fill_dp_moe_sync_metadata

        def fill(self, fb, batch):
            real(self, fb, batch)
            edit(fb)

        mp.setattr(DraftBlockProposer, "_fill_dp_moe_sync_metadata", fill)
    return patch


def _original_counts_missing(fb):
    fb.original_global_num_tokens_cpu = None  # the pre-fix draft batch never set it


def _original_counts_scaled(fb):
    if fb.global_num_tokens_cpu is not None:
        fb.original_global_num_tokens_cpu = list(fb.global_num_tokens_cpu)


def _reserve_one_window(mp):
    """The decode reserve sized for one verify window (reserve T, not 2T): the overlap lag has no slots."""
    from sglang.srt.speculative import dflash_info_v2

    real = dflash_info_v2.page_aligned_decode_alloc_lens
    mp.setattr(dflash_info_v2, "page_aligned_decode_alloc_lens",
               lambda reqs, *, reserve, page_size: real(reqs, reserve=reserve // 2, page_size=page_size))


def _page_rounded_down(mp):
    """Whole pages by floor instead of ceiling."""
    from sglang.srt.speculative import dflash_info_v2

    def alloc_lens(reqs, *, reserve, page_size):
        cur = [r.kv.kv_allocated_len for r in reqs]
        nxt = [max(c, (r.kv.kv_committed_len + reserve) // page_size * page_size) for c, r in zip(cur, reqs)]
        return cur, nxt, sum(n - c for c, n in zip(cur, nxt))

    mp.setattr(dflash_info_v2, "page_aligned_decode_alloc_lens", alloc_lens)


def _allocated_len_written_twice(mp):
    """A second writer of kv_allocated_len inside the step (re-stores it after the allocation)."""
    from sglang.srt.speculative import dflash_info_v2

    real = dflash_info_v2.alloc_for_spec_decode

    def alloc(tree_cache, req_to_token_pool, **kw):
        out = real(tree_cache, req_to_token_pool, **kw)
        for req in kw["reqs"]:
            req.kv.kv_allocated_len = req.kv.kv_allocated_len
        return out

    mp.setattr(dflash_info_v2, "alloc_for_spec_decode", alloc)


def _graph_bucket_from_tokens(mp):
    """The DP graph size taken from the scaled token counts instead of the raw request counts (the seed bug's class)."""
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    mp.setattr(DecodeCudaGraphRunner, "_max_dp_batch_size", staticmethod(lambda fb: max(fb.global_num_tokens_cpu)))


def _bucket_one_size_up(mp):
    """bisect_right for bisect_left: a batch that exactly fits a captured size replays the next one up."""
    from bisect import bisect_right

    from sglang.srt.model_executor.runner.base_cuda_graph_runner import BaseCudaGraphRunner

    mp.setattr(BaseCudaGraphRunner, "_pad_to_bucket",
               staticmethod(lambda raw, buckets: buckets[min(bisect_right(buckets, raw), len(buckets) - 1)]))


def _budget_counts_invalid_cells(mp):
    """The budget's candidates without the survival_eps filter: cells the planner would never verify inflate it."""
    from sglang.srt.speculative.dspark_components import dspark_planner

    real = dspark_planner.compute_verify_token_budget

    def budget(*, history_survival_probs, sps_table, cfg):
        import msgspec

        return real(history_survival_probs=history_survival_probs, sps_table=sps_table,
                    cfg=msgspec.structs.replace(cfg, survival_eps=-1.0))  # the rest of the config as given

    mp.setattr(dspark_planner, "compute_verify_token_budget", budget)


def _sps_lookup_unclamped(mp):
    """The probe index unclamped below the first probe: -1 wraps around and reads the last probe's steps/s."""
    from sglang.srt.speculative.dspark_components import dspark_planner

    def lookup(*, sps_table, batch_tokens):
        probes = torch.tensor(sps_table.sample_batch_tokens, dtype=torch.int64)
        sps = torch.tensor(sps_table.sample_steps_per_sec, dtype=torch.float64)
        return sps[torch.bucketize(batch_tokens, probes, right=True) - 1]

    mp.setattr(dspark_planner, "_lookup_sps_tensor", lookup)


def _softmax_ignores_temperature(mp):
    """The verify softmax at temperature 1: target and draft laws of sampled rows ignore the request's temperature."""
    from sglang.kernels.ops.speculative.dspark.dspark_accept import SoftmaxTemp

    real = SoftmaxTemp.execute.__func__

    def execute(cls, *, logits, temperatures, rows_per_request):
        return real(cls, logits=logits, temperatures=torch.ones_like(temperatures), rows_per_request=rows_per_request)

    mp.setattr(SoftmaxTemp, "execute", classmethod(execute))


def _draft_probs_at_temperature_one(mp):
    """The draft law rebuilt from its step logits at temperature 1, not at the temperature it was drawn at."""
    from sglang.srt.speculative.dspark_components import dspark_verify

    real = dspark_verify._draft_probs

    def draft_probs(draft_block, vocab, device):
        import msgspec

        return real(msgspec.structs.replace(draft_block, temperatures=torch.ones_like(draft_block.temperatures)),
                    vocab, device)

    mp.setattr(dspark_verify, "_draft_probs", draft_probs)


def _drafts_drawn_at_temperature_one(mp):
    """DeepSpec #31's class on SGLang's drafter: the Markov block draws at temperature 1 while the sampled accept
    scores the drafts with q at the request's temperature (the verify level never sees the draws: DIST-002 does)."""
    from sglang.srt.speculative.dspark_components import dspark_draft, dspark_draft_sampler

    real = dspark_draft.draft_markov_block

    def block(*, step_temperatures, **kw):
        ones = torch.where(step_temperatures > 0, torch.ones_like(step_temperatures), step_temperatures)
        return real(step_temperatures=ones, **kw)

    for module in (dspark_draft, dspark_draft_sampler):  # the eager proposer and the sampler import it by name
        mp.setattr(module, "draft_markov_block", block)


def _markov_bias_from_the_anchor(mp):
    """Every Markov step biased by the anchor, not by the draft before it (the block loop's previous token never
    advanced): the step logits left for the verify are wrong from the second draft on."""
    from sglang.srt.speculative.dspark_components import dspark_draft

    real, anchor = dspark_draft._draft_step, {}

    def draft_step(markov_head, prev_tokens, base_logits, *, step, **kw):
        if step == 0:
            anchor["tokens"] = prev_tokens
        return real(markov_head, anchor["tokens"], base_logits, step=step, **kw)

    mp.setattr(dspark_draft, "_draft_step", draft_step)


def _draft_slots_one_column_late(mp):
    """The draft forward bound to the verify window's columns 1..Q instead of 0..Q-1."""
    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan

    real = KVLocPlan.bind

    def bind(self, batch, reader, *, cols=None):
        if isinstance(cols, slice) and cols.start == 0 and cols.stop is not None:
            return real(self, batch, reader, cols=slice(1, cols.stop + 1))
        return real(self, batch, reader, cols=cols)

    mp.setattr(KVLocPlan, "bind", bind)


def _commit_gate_off_by_one(mp):
    """The commit gate `col <= commit_len`: the first rejected column is written into the draft context."""
    from sglang.srt.speculative.dspark_components.dspark_kv_inject import TargetHiddenKvInjector

    real = TargetHiddenKvInjector.committed_swa_loc

    def committed_swa_loc(self, *, commit_lens=None, **kw):
        return real(self, commit_lens=None if commit_lens is None else commit_lens + 1, **kw)

    mp.setattr(TargetHiddenKvInjector, "committed_swa_loc", committed_swa_loc)


def _tp_sync_limited_to_rng_sites(mp):
    """SGLANG_SPEC_TP_SYNC=rng (what the MiniMax-M3 override sets): the plan and greedy accept sites are not
    broadcast, so TP ranks keep their own verify lengths and accept results."""
    mp.setenv("SGLANG_SPEC_TP_SYNC", "rng")


def _accept_sync_drops_correct_len(mp):
    """The greedy accept site broadcasts the bonus and cap_trim but not correct_len."""
    from sglang.srt.speculative.spec_tp_sync import SpecTpSync, SpecTpSyncSite

    real = SpecTpSync.sync

    def sync(self, site, values):
        if site == SpecTpSyncSite.DSPARK_ACCEPT_GREEDY and values.dtype == torch.int32 and not getattr(self, "_dropped", 0):
            self._dropped = 1  # the first int32 tensor at the site is correct_len
            return values
        return real(self, site, values)

    mp.setattr(SpecTpSync, "sync", sync)


def _anchorless_rows_shifted(mp):
    """Without the anchor row sampling, the draft keeps rows 0..gamma-1 (the anchor's row included) instead of
    1..gamma, so draft k predicts position n+k, one too early."""
    from sglang.srt.speculative.dspark_components import dspark_draft

    def select(hidden_states, *, bs, gamma):
        by_query = hidden_states.view(bs, gamma + 1, *hidden_states.shape[1:])
        kept = by_query[:, :gamma].contiguous()
        return kept.view(bs * gamma, *hidden_states.shape[1:]), kept.view(bs, gamma, -1)

    mp.setattr(dspark_draft, "select_draft_hidden_without_anchor", select)


BUGS = [
    ("DSPARK handoff dispatch falls through to None", _dispatch_falls_through, ("HANDOFF-001", "HANDOFF-010")),
    ("relay stash skipped", _stash_skipped, ("HANDOFF-007",)),
    ("original_global_num_tokens_cpu not set", _fill_edit(_original_counts_missing), ("DPSYNC-001",)),
    ("original_global_num_tokens_cpu holds scaled counts", _fill_edit(_original_counts_scaled), ("DPSYNC-001",)),
    ("decode reserve of one verify window", _reserve_one_window, ("KV-001",)),
    ("decode reserve rounded down to a page", _page_rounded_down, ("KV-001",)),
    ("kv_allocated_len written twice in a step", _allocated_len_written_twice, ("KV-004",)),
    ("DP graph size from token counts", _graph_bucket_from_tokens, ("GRAPH-003",)),
    ("graph bucket one size up", _bucket_one_size_up, ("GRAPH-002",)),
    ("verify budget counts cells below survival_eps", _budget_counts_invalid_cells, ("PLAN-006",)),
    ("SPS lookup wraps below the first probe", _sps_lookup_unclamped, ("PLAN-004",)),
    ("verify softmax ignores the temperature", _softmax_ignores_temperature, ("VERIFY-011", "LOOP-006")),
    ("draft law rebuilt at temperature 1", _draft_probs_at_temperature_one, ("VERIFY-011", "LOOP-006")),
    ("drafts drawn at temperature 1", _drafts_drawn_at_temperature_one, ("DIST-002", "DRAFT-004")),
    ("Markov bias from the anchor", _markov_bias_from_the_anchor, ("DRAFT-004",)),
    ("draft KV slots one column late", _draft_slots_one_column_late, ("DRAFT-001",)),
    ("commit gate off by one", _commit_gate_off_by_one, ("DRAFT-002",)),
    ("anchorless draft rows shifted", _anchorless_rows_shifted, ("DRAFT-003",)),
    ("TP sync limited to the rng sites", _tp_sync_limited_to_rng_sites, ("RANKS-007",)),
    ("accept sync drops correct_len", _accept_sync_drops_correct_len, ("RANKS-007",)),
]


def check_caught(patch, contract_id, engine=None):
    """The bug patched in, the contract as `dspark-contracts check` runs it, caught; then intact again, it passes."""
    engine = engine or load_engine("sglang")
    contract = all_contracts()[contract_id]
    with guarded_patches() as mp:
        patch(mp)
        with pytest.raises(ContractViolation) as caught:
            run_contract(contract, engine, profile="ci")
    assert_caught(caught.value, contract, engine)  # the shrunk case passes once the bug is gone again
    if contract.cases is None:  # a fixed-scenario contract: no case to shrink; the intact engine passes it
        run_contract(contract, engine, profile="ci")


def _in_a_fresh_process(patch, contract_id):
    """Rank processes fork from this one only while it holds no process group (contracts.launcher); once a Scheduler
    was built here (another test, another order), they come from a forkserver, which a patch made in this process
    never reaches. The case then runs in a fresh interpreter, where the ranks fork and inherit the patch."""
    code = (f"from tests.sglang.test_historical_bugs import {patch.__name__} as patch, check_caught; "
            f"check_caught(patch, {contract_id!r})")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, (run.stdout[-4000:], run.stderr[-4000:])


@pytest.mark.parametrize("patch, contract_id",
                         [pytest.param(p, cid, id=f"{cid}-{name}") for name, p, ids in BUGS for cid in ids])
def test_reinserted_bug_is_caught(sglang_engine, patch, contract_id):
    import torch.distributed as dist

    if contract_id.startswith("RANKS-") and dist.is_available() and dist.is_initialized():
        _in_a_fresh_process(patch, contract_id)
    else:
        check_caught(patch, contract_id, sglang_engine)


def test_intact_sglang_passes_the_seed_examples(sglang_engine):
    for contract_id in ("HANDOFF-001", "HANDOFF-010", "DPSYNC-001", "DPSYNC-004"):
        contract = all_contracts()[contract_id]
        for case in contract.examples:
            contract.check(sglang_engine, case)


def test_an_untested_sglang_version_runs_with_its_version_line_and_the_ledger_stops_applying(sglang_engine, monkeypatch):
    """Version policy on the real pack: an SGLang the pack was not tested with (a branch, a newer release) loads and
    says so; its ledger entries (==0.5.23) no longer apply, so each contract passes or fails on its own; and
    --strict-version refuses it."""
    import importlib.metadata

    import sglang

    from contracts import ledger
    from contracts.adapters.sglang.runtime import runtime
    from contracts.engines import EngineLoadError, load_engine, version_line

    runtime()  # SGLang's CPU import setup, before its version is changed under it
    real_version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.5.24" if name == "sglang" else real_version(name))
    monkeypatch.setattr(sglang, "__version__", "0.5.24")
    engine = load_engine("sglang")
    assert version_line(engine) == "engine sglang 0.5.24 (untested; tested: 0.5.23)"
    assert engine.known_failures and ledger.engine_entries(engine, "PLAN-010") == ()
    with pytest.raises(EngineLoadError, match=r"^engine sglang 0.5.24 \(untested; tested: 0.5.23\): refused by --strict"):
        load_engine("sglang", strict_version=True)


def test_absent_sglang_fails_fast_with_the_install_command(monkeypatch):
    import importlib.metadata

    from contracts.engines import EngineLoadError, load_engine

    real_version = importlib.metadata.version

    def version(name):
        if name == "sglang":
            raise importlib.metadata.PackageNotFoundError(name)
        return real_version(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(EngineLoadError) as caught:
        load_engine("sglang")
    message = str(caught.value)
    assert "not installed" in message and "bash scripts/install_sglang.sh" in message and "\n" not in message
