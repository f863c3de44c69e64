"""Known failures: contracts an engine is known to violate, each with its evidence.

An entry must cite an upstream issue or PR (`#NNNN`) or state the evidence
(`evidence: ...`). A listed contract that starts passing fails the run, so the
ledger cannot silently outlive the bug.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

_CITATION = re.compile(r"(#\d+|evidence: \S)")


@dataclass(frozen=True)
class KnownFailure:
    engine: str
    contract_id: str
    reason: str

    def __post_init__(self):
        if not _CITATION.search(self.reason):
            raise ValueError(f"reason: a known failure must cite '#NNNN' or 'evidence: ...', got {self.reason!r}")


LEDGER: tuple = (
    KnownFailure(
        "sglang", "VERIFY-002",
        "evidence: sglang 0.5.23 BuildOutTokens (kernels/ops/speculative/dspark/dspark_verify_window.py) leaves the "
        "left-over drafts and a 0 past commit_len instead of -1 placeholders; its readers slice out_tokens[:commit_len] "
        "(batch_result_processor._resolve_spec_v2_tokens), so nothing reads them today, but a reader that trusts the row "
        "width would emit rejected drafts",
    ),
)


def lookup(engine: str, contract_id: str, ledger=None) -> Optional[KnownFailure]:
    for entry in LEDGER if ledger is None else ledger:
        if entry.engine == engine and entry.contract_id == contract_id:
            return entry
    return None
