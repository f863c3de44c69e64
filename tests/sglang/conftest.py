"""The SGLang adapters, loaded once per session for the finding and meta-tests (skipped without sglang 0.5.23)."""

import pytest

from contracts.adapters.sglang import env as sglang_env


def _load(name):
    reason = sglang_env.sglang_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    from contracts.engines import load_engine

    return load_engine(name)


@pytest.fixture(scope="session")
def sglang_engine():
    return _load("sglang")


@pytest.fixture(scope="session")
def sglang_chain_engine():
    return _load("sglang-chain")
