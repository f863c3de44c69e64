"""The contract x result table: collected from pytest reports, printed and written as JSON.

Everything a row needs travels in the reports' `user_properties` (plain strings),
because those are what survive pytest-xdist's worker -> controller serialisation.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from contracts.engines import VersionStatus

HARNESS_ERROR = "harness-error"  # the harness's own code raised (contracts.violation.HarnessError): not the engine's
_RANK = {"passed": 0, "skipped": 1, "hardening": 1, "known-failure": 2, "failed": 3, HARNESS_ERROR: 4}  # worst phase wins
# A contract whose inputs the engine's own producers never emit (the pack's `hardening`): not a finding; it runs
# only under --hardening, and its row sits under its own heading either way.
HARDENING = "hardening"
# user_properties keys: the engine under test, and a failure's ContractViolation fields.
ENGINE_KEYS = ("dspark_engine", "dspark_engine_name", "dspark_engine_spec", "dspark_engine_version",
               "dspark_engine_device", "dspark_engine_capabilities", "dspark_engine_backend",
               "dspark_engine_tested_versions", "dspark_engine_accepted_parameters", "dspark_engine_options")
FAILURE_KEYS = {"field": "dspark_field", "expected": "dspark_expected", "observed": "dspark_observed",
                "case": "dspark_case", "repro": "dspark_repro", "message": "dspark_message", "where": "dspark_where"}
HARNESS_KEYS = ("dspark_harness_error", "dspark_traceback")
SHARE_KEYS = ("dspark_example_share", "dspark_draw_share")  # a contract run at a share of its budget (contracts.budget)


def engine_properties(engine) -> list:
    from contracts.engines import engine_label, engine_spec, version_status

    values = (engine_label(engine), engine.name, engine_spec(engine), engine.version,
              engine.device, ",".join(sorted(engine.capabilities)), getattr(engine, "backend", None) or "",
              json.dumps(list(version_status(engine).tested_versions)),  # a list in one string, commas and all
              json.dumps(list(getattr(engine, "accepted_parameters", ()))), json.dumps(option_declarations(engine)))
    return list(zip(ENGINE_KEYS, map(str, values)))



def option_declarations(engine) -> dict:
    """The pack's declared options (name -> "" when the contracts turn it on, else the reason they cannot), and the
    options the engine has that the pack does not list (the pack's `option_names()`, read from the engine's own
    registry, where it has one; None where it cannot tell)."""
    declared = {o.name: o.not_exercised for o in getattr(engine, "engine_options", ())}
    names = getattr(engine, "option_names", None)
    unlisted = None if names is None else sorted(set(names()) - set(declared))
    return {"declared": declared, "unlisted": unlisted}


def parameter_gap(info: dict) -> dict:
    """What the engine accepts by the pack's word, and which of those no contract exercises on it (the gap a user
    sees instead of a green row); None where the pack declares nothing it accepts."""
    from contracts.protocol import REQUEST_PARAMETERS, exercised_parameters

    accepted = json.loads(info.get("accepted_parameters") or "[]")
    if not accepted:
        return {"accepted_parameters": None, "unexercised_parameters": None}
    exercised = exercised_parameters(info.get("capabilities") or ())
    return {"accepted_parameters": accepted,
            "unexercised_parameters": [p for p in REQUEST_PARAMETERS if p in accepted and p not in exercised]}


def finding_links(finding) -> dict:
    """A ledger Finding as a report carries it: the standalone repro, its draft report (where the checkout has it),
    and the upstream status, production path and severity."""
    from contracts.conformance import ROOT

    # A finding sharing its root cause with another names their one report; else the report is the repro's .md.
    report = getattr(finding, "report", None) or str(Path(finding.repro).with_suffix(".md"))
    return {"repro": finding.repro, "report": report if (ROOT / report).is_file() else None,
            "status": finding.status, "path": finding.path, "severity": finding.severity}


def attach_findings(data: dict) -> None:
    """Give each known-failure row of a finished run (`as_dict`'s form) its `finding`: the `finding_links` of the
    ledger entry that describes the violation, or None where that entry is no finding (a by-design or hardening
    entry). The ledger is the engine pack's, read from its class (the engine is not loaded); a pack that cannot be
    imported here leaves the rows without the field (a report made elsewhere may fill it in)."""
    from types import SimpleNamespace

    from contracts import ledger
    from contracts.engines import EngineLoadError, pack_class

    rows = [r for r in data.get("contracts", ()) if r.get("result") == "known-failure" and "finding" not in r]
    if not rows or not data.get("engine_spec"):
        return
    try:
        known = tuple(getattr(pack_class(data["engine_spec"]), "known_failures", ()))
    except EngineLoadError:
        return
    name, version = data.get("engine_name") or data["engine_spec"], data.get("engine_version") or ""
    for row in rows:
        failure = row.get("failure") or {}
        probe = SimpleNamespace(contract_id=row["id"], what=failure.get("field", ""), observed=failure.get("observed", ""))
        applying = ledger.entries(known, name, version, row["id"])
        entry = ledger.match(applying, probe)
        found = {entry.finding} if entry is not None else {e.finding for e in applying}
        if len(found) == 1:  # else no entry, or several the row's fields cannot tell apart: left without the field
            (finding,) = found
            row["finding"] = None if finding is None else finding_links(finding)


def placement_text(device, backend) -> str:
    """`device=cpu, backend=triton (Triton interpreter)`; an engine without a backend runs its own kernels."""
    if not backend:
        return f"device={device}, backend=the engine's own"
    mode = {"triton": " (Triton interpreter)" if device == "cpu" else " (compiled Triton)"}.get(backend, "")
    return f"device={device}, backend={backend}{mode}"


def failure_properties(violation) -> list:
    values = {"field": violation.what, "expected": violation.expected, "observed": violation.observed,
              "case": "" if violation.case is None else repr(violation.case), "repro": violation.repro or "",
              "message": str(violation).splitlines()[0], "where": getattr(violation, "where", None) or ""}
    return [(FAILURE_KEYS[k], str(v)) for k, v in values.items()]


def share_properties(engine, contract_id: str, profile: str) -> list:
    """The shares this contract ran at on this engine, where below 1 (a draw share never applies under nightly)."""
    from contracts import budget

    example = budget.shares(engine).get(contract_id, 1.0)
    draw = 1.0 if profile == "nightly" else budget.shares(engine, "draw_shares").get(contract_id, 1.0)
    return [(key, str(float(v))) for key, v in zip(SHARE_KEYS, (example, draw)) if v < 1]


def share_text(example_share: float, draw_share: float) -> str:
    """`examples x0.25, rows x0.5`: what a row ran at, "" at its full budget."""
    parts = [f"{what} x{share:g}" for what, share in (("examples", example_share), ("rows", draw_share)) if share < 1]
    return ", ".join(parts)


@dataclass
class Failure:
    field: str
    expected: str
    observed: str
    case: str
    repro: str
    where: str = ""  # an engine exception: the engine's frame that raised it


@dataclass
class Row:
    id: str
    statement: str
    engine: str
    requires: list = field(default_factory=list)
    result: str = "passed"
    seconds: float = 0.0
    detail: str = ""
    failure: Optional[Failure] = None
    hardening: str = ""  # why this contract is hardening on this engine ("" when it is not)
    traceback: str = ""  # a harness error's traceback
    example_share: float = 1.0  # the pack's share of the profile's examples for this contract
    draw_share: float = 1.0  # the pack's share of a Monte-Carlo contract's rows (1 under nightly)


@dataclass
class ContractTable:
    engine: str  # the spec until a report names the loaded engine (engine_label)
    rows: dict = field(default_factory=dict)
    engine_info: dict = field(default_factory=dict)  # name, spec, version, device, capabilities
    hypothesis: dict = field(default_factory=dict)  # profile, derandomize, max_examples, seed
    coverage: Optional[list] = None  # --coverage: one dict per declared engine module (contracts.reach.ModuleReach)
    warnings: list = field(default_factory=list)  # warnings raised while contracts ran: {category, message, where, count}
    date: str = ""  # when the run finished (UTC, ISO 8601); as_dict stamps it where the session did not

    def note_engine(self, properties: dict) -> None:
        if self.engine_info or "dspark_engine" not in properties:
            return
        self.engine = properties["dspark_engine"]
        self.engine_info = {k[len("dspark_engine_"):]: properties[k] for k in ENGINE_KEYS[1:] if k in properties}
        self.engine_info["capabilities"] = sorted(filter(None, self.engine_info.get("capabilities", "").split(",")))
        self.engine_info["backend"] = self.engine_info.get("backend") or None
        status = VersionStatus(self.engine_info.get("name", self.engine), self.engine_info.get("version", ""),
                               tuple(json.loads(self.engine_info.get("tested_versions") or "[]")))
        self.engine_info.update(tested_versions=list(status.tested_versions), tested=status.tested,
                                version_line=status.line, **parameter_gap(self.engine_info))
        opts = json.loads(self.engine_info.pop("options", "") or "{}")
        self.engine_info.update(options=opts.get("declared", {}), unlisted_options=opts.get("unlisted"))
        for row in self.rows.values():
            row.engine = self.engine

    def record(self, contract, outcome: str, seconds: float, detail: str = "", properties: Optional[dict] = None) -> Row:
        properties = properties or {}
        self.note_engine(properties)
        row = self.rows.setdefault(contract.id, Row(contract.id, contract.statement, self.engine, sorted(contract.requires)))
        row.hardening = row.hardening or properties.get("dspark_hardening", "")
        row.example_share = float(properties.get(SHARE_KEYS[0], row.example_share))
        row.draw_share = float(properties.get(SHARE_KEYS[1], row.draw_share))
        row.seconds += seconds
        if _RANK[outcome] > _RANK[row.result]:
            row.result, row.detail = outcome, detail
            if outcome in ("failed", "known-failure") and FAILURE_KEYS["field"] in properties:
                row.failure = Failure(**{f.name: properties.get(FAILURE_KEYS[f.name], "") for f in fields(Failure)})
                if outcome == "failed":  # a known failure keeps the ledger's reason as its detail
                    row.detail = properties.get(FAILURE_KEYS["message"]) or detail
            if outcome == HARNESS_ERROR:
                row.failure, row.traceback = None, properties.get(HARNESS_KEYS[1], "")
        return row

    def note_warning(self, category: str, message: str, where: str) -> None:
        """One warning raised during a contract; the same (category, message, where) is counted, not repeated."""
        for w in self.warnings:
            if (w["category"], w["message"], w["where"]) == (category, message, where):
                w["count"] += 1
                return
        self.warnings.append({"category": category, "message": message, "where": where, "count": 1})

    def counts(self) -> dict:
        out = {"passed": 0, "failed": 0, "skipped": 0, "known-failure": 0, "hardening": 0, HARNESS_ERROR: 0}
        for row in self.rows.values():
            out[row.result] += 1
        return out

    def progress_line(self, row: Row) -> str:
        return f"{row.id:<12} {row.result:<13} {row.seconds:6.1f}s"

    def lines(self, version_line: bool = False, verbose: bool = False, show_warnings: bool = False, **layout) -> list:
        """The table as printed (contracts.table_text); with `version_line`, headed by the engine's version line
        (`engine sglang 0.5.23`, or `... (untested; tested: ...)`), which the plugin prints there and `check` before
        the session. `verbose` adds each known failure's ledger evidence and repro line; `show_warnings` prints every
        distinct warning in full instead of counting them; `layout`: table_lines' `brief` and `width`."""
        from contracts.table_text import table_lines

        return table_lines(self, version_line=version_line, verbose=verbose, show_warnings=show_warnings, **layout)

    def as_dict(self) -> dict:
        from contracts import __version__

        info = self.engine_info
        date = self.date or datetime.now(timezone.utc).isoformat(timespec="seconds")
        # Which harness and when: a report read later, or next to another run, must say what produced it.
        data = {"harness_version": __version__, "date": date, "engine": self.engine, "engine_name": info.get("name"),
                "engine_spec": info.get("spec"),
                "engine_version": info.get("version"), "engine_device": info.get("device"),
                "engine_backend": info.get("backend"), "engine_tested_versions": info.get("tested_versions"),
                "engine_tested": info.get("tested"), "engine_version_line": info.get("version_line"),
                "capabilities": info.get("capabilities"), "accepted_parameters": info.get("accepted_parameters"),
                "unexercised_parameters": info.get("unexercised_parameters"), "options": info.get("options"),
                "unlisted_options": info.get("unlisted_options"), "hypothesis": self.hypothesis, "counts": self.counts(),
                "contracts": [asdict(r) for r in sorted(self.rows.values(), key=lambda r: r.id)],
                "warnings": self.warnings,
                **({} if self.coverage is None else {"coverage": self.coverage})}
        attach_findings(data)  # a known failure links to its finding's repro and draft report
        return data

    def write_json(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.as_dict(), f, indent=2)
