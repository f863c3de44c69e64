"""Which verify modes the step contracts draw, by the engine's ragged capabilities (contracts.step_modes)."""

from types import SimpleNamespace

import pytest

from contracts.catalog.decode_loop import DIST_CONFIGS
from contracts.protocol import REQUEST_RAGGED, STEP, STEP_RAGGED, STEP_RAGGED_LAWS
from contracts.step_modes import draws_ragged, law_configs

pytestmark = pytest.mark.cpu


def _engine(*caps):
    return SimpleNamespace(capabilities=frozenset({STEP, *caps}))


def test_the_laws_run_static_unless_the_engine_declares_ragged_laws():
    assert {c[0] for c in law_configs(_engine(), DIST_CONFIGS)} == {"static"}
    assert {c[0] for c in law_configs(_engine(STEP_RAGGED), DIST_CONFIGS)} == {"static"}
    assert law_configs(_engine(STEP_RAGGED, STEP_RAGGED_LAWS), DIST_CONFIGS) == list(DIST_CONFIGS)


def test_whole_request_contracts_need_request_ragged_too():
    ragged = _engine(STEP_RAGGED, STEP_RAGGED_LAWS)
    assert {c[0] for c in law_configs(ragged, DIST_CONFIGS, requests=True)} == {"static"}
    assert draws_ragged(ragged) and not draws_ragged(ragged, requests=True)
    assert draws_ragged(_engine(STEP_RAGGED, REQUEST_RAGGED), requests=True)
    assert not draws_ragged(_engine(REQUEST_RAGGED), requests=True)
    assert law_configs(_engine(STEP_RAGGED, STEP_RAGGED_LAWS, REQUEST_RAGGED), DIST_CONFIGS, requests=True) == list(DIST_CONFIGS)
