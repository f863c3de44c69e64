"""The contract x result table: collected from pytest reports, printed and written as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

_RANK = {"passed": 0, "skipped": 1, "known-failure": 2, "failed": 3}  # the worst outcome of a contract's phases wins


@dataclass
class Row:
    id: str
    statement: str
    engine: str
    result: str = "passed"
    seconds: float = 0.0
    detail: str = ""


@dataclass
class ContractTable:
    engine: str
    rows: dict = field(default_factory=dict)

    def record(self, contract, outcome: str, seconds: float, detail: str = "") -> None:
        row = self.rows.setdefault(contract.id, Row(contract.id, contract.statement, self.engine, outcome))
        row.seconds += seconds
        if _RANK[outcome] > _RANK[row.result]:
            row.result, row.detail = outcome, detail

    def counts(self) -> dict:
        out = {"passed": 0, "failed": 0, "skipped": 0, "known-failure": 0}
        for row in self.rows.values():
            out[row.result] += 1
        return out

    def lines(self) -> list:
        width = max((len(r.id) for r in self.rows.values()), default=2)
        out = [f"{'contract':<{width}}  {'result':<7}  {'time':>6}  statement"]
        for r in sorted(self.rows.values(), key=lambda r: r.id):
            text = r.statement if len(r.statement) <= 100 else r.statement[:97] + "..."
            out.append(f"{r.id:<{width}}  {r.result:<7}  {r.seconds:5.1f}s  {text}")
            if r.result != "passed" and r.detail:
                out.append(f"{'':<{width}}  {'':<7}  {'':>6}  -> {r.detail}")
        c = self.counts()
        out.append(f"engine={self.engine}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped, "
                   f"{c['known-failure']} known failures")
        return out

    def write_json(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump({"engine": self.engine, "counts": self.counts(),
                       "contracts": [asdict(r) for r in sorted(self.rows.values(), key=lambda r: r.id)]}, f, indent=2)
