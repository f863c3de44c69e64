"""The adapter guide's hand-written parts a pack author relies on: what every capability promises (one entry per
capability in contracts.protocol.CAPABILITIES, so a new one cannot go unexplained) and what a greedy-only engine
declares."""

import re
from pathlib import Path

from contracts.protocol import CAPABILITIES

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "writing-an-adapter.md"


def _section() -> str:
    text = GUIDE.read_text()
    return text.split("### What each capability promises", 1)[1].split("Precision: ", 1)[0]


def test_every_capability_says_what_it_promises():
    described = set(re.findall(r"`([a-z0-9.-]+)`(?: \(a mode\))?: ", _section()))
    assert described == set(CAPABILITIES), {"undescribed": sorted(set(CAPABILITIES) - described),
                                            "not capabilities": sorted(described - set(CAPABILITIES))}


def test_the_guide_says_what_a_greedy_only_engine_declares_and_how_long_a_check_takes():
    section = _section()
    assert "A greedy-only engine" in section and "`request.verify`" in section
    assert re.search(r"runs `check` in about \d+ s wall", section)
