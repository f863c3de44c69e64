"""The DP and ranks levels' contract modules name no engine's attributes: adapters map their engine's names onto the
neutral ones.

Exact for the DP level (contracts/boundary/dp.py, contracts/catalog/dp_sync.py, contracts/strategies/dp.py): none
of SGLang's or vLLM's DP attribute names appears in them, the protocol's method names included. Both adapters' name
maps cover every neutral field.
"""

import dataclasses
import re
from pathlib import Path

import pytest

from contracts.boundary import dp

ROOT = Path(__file__).resolve().parents[2]
DP_MODULES = ("contracts/boundary/dp.py", "contracts/catalog/dp_sync.py", "contracts/strategies/dp.py")
RANKS_MODULES = ("contracts/boundary/ranks.py", "contracts/catalog/ranks.py", "contracts/strategies/ranks.py")
# SGLang 0.5.23's ForwardBatch / ScheduleBatch / spec-info names and vLLM 0.32's DP names for the same things.
ENGINE_NAMES = (
    "original_global_num_tokens_cpu", "global_num_tokens_cpu", "global_num_tokens_gpu", "global_num_tokens_for_logprob",
    "global_num_tokens", "num_token_non_padded", "global_num_token_non_padded", "can_run_decode_cuda_graph",
    "is_extend_in_batch", "dp_spec_prefill_coordination_applied", "enable_num_token_non_padded", "dp_moe_sync",
    "num_tokens_per_dp", "input_ids", "spec_scale_global_num_tokens", "_fill_dp_moe_sync_metadata", "ForwardBatch",
    "num_tokens_across_dp", "coordinate_batch_across_dp", "_post_process_dp_padding", "DPSyncState", "dp_utils",
)


def _code_names(path: str) -> str:
    # A statement may name SGLang's attribute for a reader, as "SGLang's NAME"; that mention is not a use.
    text = re.sub(r"SGLang's \w+", "<engine's name>", (ROOT / path).read_text())
    return text


@pytest.mark.parametrize("path", DP_MODULES + RANKS_MODULES)
def test_dp_level_modules_name_no_engine_attribute(path):
    text = _code_names(path)
    found = sorted(name for name in ENGINE_NAMES if re.search(rf"(?<![A-Za-z_]){re.escape(name)}(?![A-Za-z_])", text))
    assert not found, f"{path} names engine attributes {found}; use the neutral names of contracts.boundary.dp/ranks"


@pytest.mark.parametrize("pack", ["reference", "sglang"])
def test_each_packs_table_maps_every_neutral_dp_field(pack):
    import importlib

    names = importlib.import_module(f"contracts.adapters.{pack}.names").FIELD_NAMES
    assert set(names) == set(dp.ALL_FIELDS), f"{pack}: FIELD_NAMES does not cover {set(dp.ALL_FIELDS) ^ set(names)}"


def test_reference_ranks_adapter_maps_every_neutral_count_field():
    from contracts.adapters.reference import ranks as reference_ranks
    from contracts.boundary.ranks import RankStep

    counts = {f.name for f in dataclasses.fields(RankStep) if f.name.startswith("rank_")}
    assert set(reference_ranks.FIELD_NAMES) == counts, set(reference_ranks.FIELD_NAMES) ^ counts
    assert set(reference_ranks.FIELD_NAMES) <= set(dp.ALL_FIELDS)  # the DP level's own names for the same counts
