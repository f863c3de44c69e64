"""The conformance matrix: `check --json` runs merged into one engines x contracts table.

One column per run, one row per contract. A column carries what made it (the engine's version line, the run's date
and harness version, where it ran, the install line of the engine's docs page) and what the run did not exercise (the
pack's accepted request parameters no contract drew, its options the contracts do not turn on). A cell carries its
result, the capabilities a skipped contract lacked, and a known failure's finding (the ledger's standalone repro and
the draft report next to it). `dspark-contracts report` writes the matrix as JSON and renders it as the HTML page
(contracts.html_report); a matrix it wrote is also an input, so pages can be merged again.

Inputs are checked before anything is written: an error names the file and the field.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

FORMAT = "dspark-contracts conformance 1"
RESULTS = ("passed", "failed", "known-failure", "hardening", "skipped", "harness-error")
# The checkout the harness runs from: its docs/engines/ pages and findings/ (absent where installed from a wheel).
ROOT = Path(__file__).resolve().parents[1]
_ROW_KEYS = ("id", "statement", "requires", "engine")  # a row's keys that belong to the contract, not the cell
_DROPPED = ("contracts", "coverage_lines", "coverage_new")  # per-line coverage data: not what the page shows


class BadInput(ValueError):
    """An input that is not a `check --json` result nor a matrix; the message names the file and the field."""


def _bad(source: str, problem: str) -> BadInput:
    return BadInput(f"{source}: expected a `check --json` result or a conformance matrix: {problem}")


def check_run(run, source: str) -> dict:
    """`run` if it has what a column needs, else BadInput naming `source` and the field at fault."""
    if not isinstance(run, dict):
        raise _bad(source, f"the document is a JSON {type(run).__name__}, not an object")
    for key, kind in (("engine", str), ("contracts", list)):
        if key not in run:
            raise _bad(source, f"no field '{key}'")
        if not isinstance(run[key], kind):
            raise _bad(source, f"field '{key}' is a {type(run[key]).__name__}, expected a {kind.__name__}")
    for i, row in enumerate(run["contracts"]):
        where = f"contracts[{i}]"
        if not isinstance(row, dict):
            raise _bad(source, f"{where} is a {type(row).__name__}, expected an object")
        for key in ("id", "result"):
            if not isinstance(row.get(key), str):
                raise _bad(source, f"{where}.{key}: missing or not a string")
        if row["result"] not in RESULTS:
            raise _bad(source, f"{where}.result: {row['result']!r} is not one of {', '.join(RESULTS)}")
    return run


def check_matrix(matrix, source: str) -> dict:
    if matrix.get("format") != FORMAT:
        raise _bad(source, f"field 'format' is {matrix.get('format')!r}, expected {FORMAT!r}")
    for key in ("engines", "contracts"):
        if not isinstance(matrix.get(key), list):
            raise _bad(source, f"no list '{key}'")
    names = []
    for i, entry in enumerate(matrix["engines"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("column"), str):
            raise _bad(source, f"engines[{i}].column: missing or not a string")
        names.append(entry["column"])
    for i, row in enumerate(matrix["contracts"]):
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not isinstance(row.get("cells"), dict):
            raise _bad(source, f"contracts[{i}]: expected an object with 'id' and 'cells'")
        for name, cell in row["cells"].items():
            if name not in names:
                raise _bad(source, f"contracts[{i}].cells: {name!r} is no column of 'engines'")
            if cell is not None and (not isinstance(cell, dict) or cell.get("result") not in RESULTS):
                raise _bad(source, f"contracts[{i}].cells[{name!r}].result: not one of {', '.join(RESULTS)}")
    return matrix


def read_input(path: str) -> list:
    """The runs in one input file: a `check --json` result is one; a matrix gives back one per column."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory, expected a `check --json` file") from None
    except (UnicodeDecodeError, ValueError) as e:  # json.JSONDecodeError names no file
        raise BadInput(f"{path}: not JSON ({e})") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot be read ({e.strerror or e})") from None
    if isinstance(data, dict) and "format" in data:
        return runs_of(check_matrix(data, path))
    run = check_run(data, path)
    run.setdefault("source", path)
    return [run]


def runs_of(matrix: dict) -> list:
    """The matrix's columns as runs again (the rows a column has, in the matrix's order)."""
    runs = []
    for entry in matrix["engines"]:
        name = entry["column"]
        rows = [{"id": c["id"], "statement": c.get("statement", ""), "requires": c.get("requires", []),
                 "engine": entry.get("engine"), **c["cells"][name]}
                for c in matrix["contracts"] if c["cells"].get(name) is not None]
        runs.append({**{k: v for k, v in entry.items() if k != "column"}, "contracts": rows})
    return runs


def column_names(runs) -> list:
    """`sglang 0.5.23`; the placement where it is not the CPU's torch (the same engine's Triton run beside it);
    `(run N)` after a name already taken."""
    names = []
    for run in runs:
        name = run["engine"] + (f" {run['engine_version']}" if run.get("engine_version") else "")
        where = (run.get("engine_device"), run.get("engine_backend"))
        if where[1] and where != ("cpu", "torch"):
            name += f" {where[0]}/{where[1]}"
        names.append(name if name not in names else f"{name} (run {len(names) + 1})")
    return names


def missing_capabilities(row: dict, run: dict) -> list:
    return sorted(set(row.get("requires") or ()) - set(run.get("capabilities") or ()))


def _cell(row: dict, run: dict) -> dict:
    cell = {k: v for k, v in row.items() if k not in _ROW_KEYS}
    if row["result"] == "skipped":
        cell["missing"] = missing_capabilities(row, run)
    return cell


def _docs_page(name: str) -> Optional[Path]:
    """The docs/engines page of engine `name`: its own, else the page whose title names it, else one showing
    `--engine NAME` (sglang-chain is on sglang's page)."""
    folder = ROOT / "docs" / "engines"
    own = folder / f"{name}.md"
    if own.is_file():
        return own
    pages = sorted(folder.glob("*.md")) if folder.is_dir() else []
    named = re.compile(rf"(`|--engine ){re.escape(name)}(?![\w-])")
    for page in pages:
        if named.search(page.read_text(encoding="utf-8").split("\n", 1)[0]):
            return page
    return next((p for p in pages if re.search(rf"--engine {re.escape(name)}(?![\w-])", p.read_text(encoding="utf-8"))),
                None)


def install_line(name: Optional[str]) -> Optional[dict]:
    """`{"doc": "docs/engines/sglang.md", "command": ...}`: the commands of the page's Install section, in order, up to
    the line that installs the engine (its scripts/install_*.sh, else the pip install; DeepSpec's clone of its tree
    comes first); None where the checkout has no page for the engine (a user's pack, a wheel install)."""
    page = _docs_page(name) if name else None
    if page is None:
        return None
    section = re.search(r"^## Install[^\n]*\n(.*?)(?=^## |\Z)", page.read_text(encoding="utf-8"), re.S | re.M)
    blocks = re.findall(r"```(?:bash|console|sh)?\n(.*?)```", section.group(1) if section else "", re.S)
    lines = [" ".join(ln.split()) for block in blocks for ln in block.replace("\\\n", " ").splitlines() if ln.strip()]
    last = next((i for i, ln in enumerate(lines) if "scripts/install_" in ln), None)
    if last is None:
        last = next((i for i, ln in enumerate(lines) if "pip install" in ln), None)
    return {"doc": page.relative_to(ROOT).as_posix(), "command": None if last is None else "\n".join(lines[:last + 1])}


def _engine_entry(run: dict, name: str) -> dict:
    entry = {"column": name, **{k: v for k, v in run.items() if k not in _DROPPED}}
    if "install" not in entry:  # a matrix read back keeps the line it was made with
        entry["install"] = install_line(run.get("engine_name") or run["engine"].split(" (")[0])
    if "counts" not in entry:
        entry["counts"] = {k: sum(r["result"] == k for r in run["contracts"]) for k in RESULTS}
    return entry


def build(runs, date: Optional[str] = None) -> dict:
    """The matrix of `runs` (each a checked `check --json` result), columns in their order, rows by contract id.
    Known failures whose run predates the `finding` field get it from the engine's pack where it imports."""
    from contracts import __version__
    from contracts.report import attach_findings

    runs = list(runs)
    if not runs:
        raise BadInput("runs: expected at least one run (a `check --json` result)")
    for i, run in enumerate(runs):
        check_run(run, (run.get("source") if isinstance(run, dict) else None) or f"runs[{i}]")
    runs = [{**run, "contracts": [dict(r) for r in run["contracts"]]} for run in runs]  # the caller's stay as given
    for run in runs:
        attach_findings(run)
    names = column_names(runs)
    contracts = {}
    for run, name in zip(runs, names):
        for row in run["contracts"]:
            slot = contracts.setdefault(row["id"], {"id": row["id"], "statement": row.get("statement", ""),
                                                     "requires": sorted(row.get("requires") or []), "cells": {}})
            slot["cells"][name] = _cell(row, run)
    for slot in contracts.values():
        slot["cells"] = {name: slot["cells"].get(name) for name in names}  # every column, None where not run
    return {"format": FORMAT, "harness_version": __version__,
            "date": date or datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "engines": [_engine_entry(run, name) for run, name in zip(runs, names)],
            "contracts": [contracts[cid] for cid in sorted(contracts)]}


def merge(paths) -> dict:
    """The matrix of every run in the files `paths` (check results and matrices), each file checked first."""
    runs = [run for path in paths for run in read_input(path)]
    return build(runs)
