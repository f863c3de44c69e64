"""The loaded vllm-dspark engine (vLLM 0.33.0's V2 DSpark code) for the meta-tests; skipped without vllm 0.33."""

import pytest

from contracts.adapters.vllm_dspark import env as vllm_dspark_env

SPEC = "contracts.adapters.vllm_dspark:VLLMDSparkAdapter"  # module:factory: works without the entry point


@pytest.fixture(scope="session")
def vllm_dspark_engine():
    reason = vllm_dspark_env.vllm_dspark_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    from contracts.engines import load_engine

    return load_engine(SPEC)
