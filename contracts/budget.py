"""Per-engine example shares: the fraction of the profile's examples a contract runs on an engine whose path for
it is slow (SGLang's interpreted Triton, its scheduler's steps). A pack declares them as `example_shares`
({contract id: share in (0, 1]}); the share scales the profile, so `ci` runs fewer examples and `nightly` still
runs its full depth times the share. Declared shares are listed in the pack's docs page.

A Monte-Carlo contract (marked `stat`) has rows, not examples: a pack whose engine draws them slowly (DeepSpec
verifies one request per call) declares `draw_shares`, the fraction of those rows it runs outside `nightly`;
`nightly` runs them all. Their power at the share is in the engine's docs page (`python -m contracts.calibration
--draw-share`).

The running contract's Hypothesis profile travels the same way: a contract run with an explicit profile (the
negative controls run at `ci`) has the budgets computed inside it (the decode-loop machine) read that profile,
not whichever one the process loaded."""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar

_SHARE: ContextVar[float] = ContextVar("example_share", default=1.0)
_DRAW_SHARE: ContextVar[float] = ContextVar("draw_share", default=1.0)
_PROFILE: ContextVar[str | None] = ContextVar("hypothesis_profile", default=None)


def shares(engine, kind: str = "example_shares") -> dict:
    return dict(getattr(engine, kind, None) or {})


def check_shares(engine, contracts: dict) -> None:
    """Load-time check of a pack's `example_shares` and `draw_shares`: known contract ids (Monte-Carlo ones for
    draw shares), shares in (0, 1]."""
    for kind in ("example_shares", "draw_shares"):
        declared = getattr(engine, kind, None)
        if declared is None:
            continue
        if not isinstance(declared, dict):
            raise TypeError(f"{kind}: expected a dict of contract id -> share, got {type(declared).__name__}")
        for cid, share in declared.items():
            if cid not in contracts:
                raise ValueError(f"{kind}: unknown contract id {cid!r}")
            if kind == "draw_shares" and "stat" not in contracts[cid].marks:
                raise ValueError(f"{kind}: {cid} draws no Monte-Carlo rows (not a `stat` contract)")
            if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
                raise ValueError(f"{kind}[{cid!r}]: expected a share in (0, 1], got {share!r}")


@contextmanager
def share_of(engine, contract_id: str, profile: str | None = None):
    """While a contract runs: its share on this engine and its profile (None: the loaded one), for the budgets
    computed inside (the decode-loop machine)."""
    token = _SHARE.set(float(shares(engine).get(contract_id, 1.0)))
    dtoken = _DRAW_SHARE.set(float(shares(engine, "draw_shares").get(contract_id, 1.0)))
    ptoken = _PROFILE.set(profile)
    try:
        yield
    finally:
        _PROFILE.reset(ptoken)
        _DRAW_SHARE.reset(dtoken)
        _SHARE.reset(token)


def base_settings():
    """The running contract's Hypothesis settings: its profile's, else the loaded default."""
    from hypothesis import settings

    name = _PROFILE.get()
    return settings.default if name is None else settings.get_profile(name)


def scaled(max_examples: int) -> int:
    """`max_examples` times the running contract's share, at least 1."""
    return max(1, math.ceil(max_examples * _SHARE.get()))


def rows(n: int) -> int:
    """A Monte-Carlo contract's `n` rows times the running contract's draw share; all of them under `nightly`."""
    from hypothesis import settings

    nightly = (_PROFILE.get() or settings.get_current_profile_name()) == "nightly"
    return n if nightly else max(1, math.ceil(n * _DRAW_SHARE.get()))
