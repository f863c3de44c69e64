"""The loaded DeepSpec engine, for the negative controls (skipped where DeepSpec or transformers 5.10.2 is absent)."""

import pytest

from contracts.adapters.deepspec import env as deepspec_env

SPEC = "contracts.adapters.deepspec:DeepSpecAdapter"  # module:factory: works without the entry point


@pytest.fixture(scope="session")
def deepspec_engine():
    reason = deepspec_env.deepspec_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    from contracts.engines import engine_names, load_engine

    # The entry point once pyproject declares it (repro lines then say `--engine deepspec`), else module:factory.
    return load_engine("deepspec" if "deepspec" in engine_names() else SPEC)
