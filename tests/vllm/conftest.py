"""The loaded vLLM engine, for the findings and the meta-tests (its corrections live in the pack: contracts.adapters.vllm.corrections)."""

import pytest

from contracts.adapters.vllm import env as vllm_env


@pytest.fixture(scope="session")
def vllm_engine():
    reason = vllm_env.vllm_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    from contracts.engines import load_engine

    return load_engine("vllm")
