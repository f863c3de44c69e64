"""Checks that run before any contract does: the adapter an engine returns, and `check`'s arguments.

Each raises ValueError or TypeError with one line naming the field or flag, so a
bad engine or a typo fails at once instead of as a skipped or crashed contract.
"""

from __future__ import annotations

import difflib
from typing import Iterable

from contracts.protocol import CAPABILITIES

_STR_FIELDS = ("name", "version", "device")


def validate_adapter(engine) -> None:
    """The adapter's identity fields, its capability names, and each declared capability's methods."""
    for field in _STR_FIELDS + ("capabilities",):
        if not hasattr(engine, field):
            raise TypeError(f"it is not an adapter: it has no {field!r}")
    for field in _STR_FIELDS:
        value = getattr(engine, field)
        if not isinstance(value, str) or not value:
            raise TypeError(f"{field}: expected a non-empty str, got {value!r}")
    caps = engine.capabilities
    # A bare string would iterate as single letters and pass every membership test wrongly.
    if isinstance(caps, (str, bytes)) or not isinstance(caps, (set, frozenset, tuple, list)):
        raise TypeError(f"capabilities: expected a set of capability names, got {type(caps).__name__}")
    bad_types = [c for c in caps if not isinstance(c, str)]
    if bad_types:
        raise TypeError(f"capabilities: expected str names, got {bad_types!r}")
    unknown = sorted(set(caps) - set(CAPABILITIES))
    if unknown:
        raise ValueError(f"capabilities: unknown {', '.join(map(repr, unknown))}; known: {', '.join(sorted(CAPABILITIES))}")
    gaps = []
    for cap in sorted(caps):
        spec = CAPABILITIES[cap]
        missing = [m for m in spec.methods if not callable(getattr(engine, m, None))]
        if missing:
            gaps.append(f"{cap!r} lacks {', '.join(missing)} (see {spec.protocol})")
        # The methods are the Protocol's; only presence is checked, their behaviour is what the contracts test.
    if gaps:
        raise TypeError("capabilities: declared but not implemented: " + "; ".join(gaps))


def _suggest(value: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(value, list(known), n=3, cutoff=0.5)
    return f"; did you mean {', '.join(close)}?" if close else ""


def contract_ids(ids: Iterable[str], known: Iterable[str]) -> list:
    """`--contract` values, upper-cased, each one a registered id (duplicates dropped, order kept)."""
    known = list(known)
    out = []
    for raw in ids:
        cid = raw.strip().upper()
        if cid not in known:
            raise ValueError(f"--contract: unknown contract id {raw!r}{_suggest(cid, known)} "
                             f"(`dspark-contracts list` prints them all)")
        if cid not in out:
            out.append(cid)
    return out


def capability(level: str, flag: str = "--require") -> str:
    if level not in CAPABILITIES:
        raise ValueError(f"{flag}: unknown capability {level!r}{_suggest(level, CAPABILITIES)} "
                         f"(known: {', '.join(sorted(CAPABILITIES))})")
    return level


def workers(value: str) -> str:
    """`-n`: a positive int or 'auto', and pytest-xdist installed to honour it."""
    import importlib.util

    text = str(value).strip().lower()
    if text != "auto" and not (text.isdigit() and int(text) > 0):
        raise ValueError(f"-n/--workers: expected a positive integer or 'auto', got {value!r}")
    if importlib.util.find_spec("xdist") is None:
        raise ValueError("-n/--workers: needs pytest-xdist, which is not installed (pip install pytest-xdist)")
    return text
