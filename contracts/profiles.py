"""Hypothesis profiles: `dev` (laptop), `ci` (derandomized, no database), `nightly` (deep)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

PROFILES = ("dev", "ci", "nightly")
ENV = "DSPARK_HYPOTHESIS_PROFILE"


def register() -> None:
    # On Hypothesis' defaults, not on whatever profile is loaded now: under CI=true Hypothesis loads its own
    # derandomized "ci" at import, and dev or nightly built on it would silently ignore --hypothesis-seed.
    base = settings.get_profile("default")
    settings.register_profile("dev", base, max_examples=50, deadline=None)
    # Same examples every run, so a CI failure reproduces locally with `--hypothesis-profile ci`.
    # The explain phase costs more than shrinking on these strategies and adds nothing the
    # violation message does not already say, so CI leaves it out.
    settings.register_profile("ci", derandomize=True, database=None, deadline=None, max_examples=100,
                              print_blob=True, suppress_health_check=[HealthCheck.too_slow],
                              phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink])
    settings.register_profile("nightly", base, max_examples=2000, deadline=None)


def default_profile() -> str:
    if os.environ.get(ENV):
        return os.environ[ENV]
    return "ci" if os.environ.get("CI") else "dev"
