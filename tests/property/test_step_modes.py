"""Which configurations the statistical step contracts run, by the engine's ragged capabilities."""

from types import SimpleNamespace

import pytest

from contracts.catalog.decode_loop import DIST_CONFIGS
from contracts.protocol import STEP, STEP_RAGGED, STEP_RAGGED_LAWS
from contracts.step_modes import law_configs

pytestmark = pytest.mark.cpu


def _modes(caps):
    return [c[0] for c in law_configs(SimpleNamespace(capabilities=frozenset(caps)), DIST_CONFIGS)]


def test_static_only_without_step_ragged():
    assert set(_modes({STEP})) == {"static"} and len(_modes({STEP})) == 2


def test_one_configuration_per_ragged_mode_with_step_ragged():
    modes = _modes({STEP, STEP_RAGGED})
    assert modes.count("static") == 2 and modes.count("cap-accept") == 1 and modes.count("compact") == 1
    assert law_configs(SimpleNamespace(capabilities={STEP_RAGGED}), DIST_CONFIGS)[1] == DIST_CONFIGS[1]  # the first


def test_every_configuration_with_step_ragged_laws():
    assert _modes({STEP, STEP_RAGGED, STEP_RAGGED_LAWS}) == [c[0] for c in DIST_CONFIGS]
