"""The generated tables of README.md and docs/, built from the code that holds their facts.

    python -m contracts.docs           rewrite every generated block in place
    python -m contracts.docs --check   exit 1 naming each file whose blocks are stale

A block sits between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``;
the text around it is written by hand. Engines are found only through the
``dspark_contracts.engines`` entry points this project declares. Each one's adapter class is
imported but never instantiated: a pack module does not import its engine, so
the tables come out the same whether SGLang or vLLM is installed or not.
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Callable, Dict, List, Tuple

from contracts.protocol import CAPABILITIES

ROOT = Path(__file__).resolve().parents[1]
GROUP = "dspark_contracts.engines"
DIST = "dspark-contracts"  # the distribution whose packs the tables list
END = "<!-- end generated -->"
_BLOCK = re.compile(r"(<!-- generated: ([a-z0-9-]+) -->\n)(.*?)(" + re.escape(END) + ")", re.S)
# Blocks a file must hold: deleting one by accident would otherwise pass --check.
REQUIRED = {
    "README.md": ("engine-matrix",),
    "docs/contracts.md": ("contracts",),
    "docs/known-failures.md": ("known-failures",),
    "docs/writing-an-adapter.md": ("capabilities",),
    "docs/cli.md": ("cli",),
}


def _ours(ep) -> bool:
    """Declared by this project: a pack installed from elsewhere must not make the committed tables stale."""
    dist = getattr(ep, "dist", None)
    return dist is None or re.sub(r"[-_.]+", "-", dist.name).lower() == DIST


def packs() -> List[Tuple[str, type]]:
    """(entry point name, adapter class) for every engine pack this project declares, sorted by name."""
    out = []
    for ep in sorted(filter(_ours, entry_points(group=GROUP)), key=lambda e: e.name):
        try:
            out.append((ep.name, ep.load()))
        except Exception as e:  # a pack that cannot be imported is a broken install, not a row to leave out
            raise RuntimeError(f"engine pack {ep.name!r} ({ep.value}) could not be imported: {type(e).__name__}: {e}") from e
    return out


def _cell(text: str) -> str:
    """Plain text made safe inside a Markdown table cell."""
    return " ".join(str(text).replace("\\", "\\\\").replace("|", "\\|").replace("*", "\\*").replace("<", "&lt;").split())


def _code(text: str) -> str:
    return "`" + str(text).replace("|", "\\|") + "`"  # GFM splits cells on | even inside code spans


def _table(header: List[str], rows: List[List[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def levels() -> Dict[str, List[str]]:
    """Capabilities grouped by level (the name before the dot), in the order contracts.protocol lists them; modes
    (configurations, not features) are left out."""
    out: Dict[str, List[str]] = {}
    for name, cap in CAPABILITIES.items():
        if not cap.mode:
            out.setdefault(name.split(".")[0], []).append(name)
    return out


def _subs(names: List[str]) -> str:
    """`verify.float64, verify.cap-trim` -> `float64, cap-trim`: the level is the column's name already."""
    return ", ".join(n.split(".", 1)[1] for n in names if "." in n)


def _level_cell(level: str, members: List[str], declared: frozenset) -> str:
    have = [m for m in members if m in declared]
    if not have:
        return "-"
    if len(have) == len(members):
        return "yes"
    if level in have:
        return "yes, without " + _subs([m for m in members if m not in declared])
    return _subs(have) + " only"


def _tested(cls) -> str:
    return ", ".join(getattr(cls, "tested_versions", ())) or "-"


def _known(cls) -> tuple:
    return tuple(getattr(cls, "known_failures", ()))


def engine_matrix() -> str:
    groups = levels()
    header = ["engine (`--engine`)", "tested versions", *groups, "known failures", "hardening"]
    rows = []
    for name, cls in packs():
        label = _code(name) if cls.name == name else f"{_code(name)} (adapter {_code(cls.name)})"
        declared = frozenset(cls.capabilities)
        hardening = sorted(getattr(cls, "hardening", {}))
        known = sorted({e.contract_id for e in _known(cls) if e.engine == cls.name} - set(hardening))
        rows.append([label, _tested(cls), *(_level_cell(g, m, declared) for g, m in groups.items()),
                     ", ".join(known) or "-", ", ".join(hardening) or "-"])
    note = ("`yes`: the level and all its sub-capabilities; `yes, without X`: the level but not sub-capability X; "
            "`X only`: sub-capability X without the level; `-`: not declared.\n")
    return _table(header, rows) + "\n" + note


def capability_table() -> str:
    engines = packs()
    header = ["capability", "methods it adds", "boundary Protocol", "declared by"]
    rows = []
    for name, cap in CAPABILITIES.items():
        methods = ", ".join(cap.methods) or "none (a promise about behaviour)"
        protocol = _code(cap.protocol) if cap.protocol else "-"
        by = ", ".join(n for n, cls in engines if name in cls.capabilities) or "-"
        rows.append([_code(name), methods, protocol, by])
    return _table(header, rows)


def contracts_table() -> str:
    from contracts.registry import all_contracts

    rows = [[c.id, ", ".join(_code(r) for r in sorted(c.requires)), ", ".join(c.marks) or "-", _cell(c.statement)]
            for c in all_contracts().values()]
    return _table(["id", "requires", "marks", "statement"], rows)


def _versions(entry) -> str:
    return entry.versions


def known_failures_table() -> str:
    entries = {e for _, cls in packs() for e in _known(cls)}  # packs that share a ledger list each entry once
    entries = sorted(entries, key=lambda e: (e.engine, e.contract_id, e.field, e.observed or ""))
    reasons: List[str] = []
    rows = []
    for e in entries:
        if e.reason not in reasons:
            reasons.append(e.reason)
        field = _code(e.field) + (f" (observed {_code(e.observed)})" if e.observed else "")
        rows.append([_code(e.engine), _code(_versions(e)), e.contract_id, field, f"E{reasons.index(e.reason) + 1}"])
    if not rows:
        return "No engine pack declares a known failure.\n"
    text = _table(["engine", "versions", "contract", "field (regex)", "reason"], rows)
    text += "\n" + "".join(f"- **E{i}**: {_cell(r)}\n" for i, r in enumerate(reasons, 1))
    return text + "\n" + _findings_table(entries)


def _findings_table(entries) -> str:
    """One row per finding (entries that share one list their contracts together); hardening entries carry none."""
    by_finding: dict = {}
    for e in entries:
        if e.finding is not None:
            by_finding.setdefault(e.finding, (e.engine, set()))[1].add(e.contract_id)
    rows = [[_code(engine), ", ".join(sorted(ids)), _cell(f.status), _cell(f.path), _cell(f.severity),
             f"[{f.repro.rsplit('/', 1)[-1]}](../{f.repro})"] for f, (engine, ids) in by_finding.items()]
    return "Findings (hardening entries are not findings):\n\n" + _table(
        ["engine", "contracts", "upstream status", "production path", "severity", "standalone repro"], rows)


def _commands() -> Tuple[dict, dict]:
    """({command: its parser}, {command: its one-line help}) of `dspark-contracts`."""
    from contracts.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices, {a.dest: a.help for a in sub._choices_actions}


def _flag_row(action: argparse.Action) -> List[str]:
    names = ", ".join(action.option_strings) or action.dest
    if action.choices:
        value = "|".join(map(str, action.choices))
    elif action.nargs == 0:
        value = ""
    else:
        value = action.metavar or action.dest.upper()
    if action.nargs == "+":
        value += " ..."
    meaning = "; ".join(filter(None, ["required" if action.required and action.option_strings else "", action.help]))
    return [_code(names), _code(value) if value else "", _cell(meaning or "-")]


def cli_reference() -> str:
    """The commands, their flags and the exit codes, read from the parser itself (not from --help's text, whose
    layout changes with the Python version and the terminal width)."""
    from contracts.cli import EXIT_CODES

    parsers, helps = _commands()
    out = [_table(["command", "what it does"], [[_code(f"dspark-contracts {n}"), _cell(helps.get(n) or "")]
                                                 for n in parsers])]
    for name, parser in parsers.items():
        rows = [_flag_row(a) for a in parser._actions if not isinstance(a, argparse._HelpAction)]
        if rows:
            about = " ".join((parser.description or "").split())
            out.append(f"\n`dspark-contracts {name}`" + (f": {about}" if about else ":") + "\n\n"
                       + _table(["flag", "value", "meaning"], rows))
    codes: List[List[str]] = []
    for line in EXIT_CODES.splitlines()[1:]:
        m = re.match(r"\s+(\d)\s+(.*)", line)
        if m:
            codes.append([m.group(1), m.group(2)])
        elif line.strip() and codes:
            codes[-1][1] += " " + line.strip()
    out.append("\nExit codes (all commands):\n\n" + _table(["code", "meaning"], [[c, _cell(t)] for c, t in codes]))
    return "".join(out)


BLOCKS: Dict[str, Callable[[], str]] = {
    "cli": cli_reference,
    "engine-matrix": engine_matrix,
    "capabilities": capability_table,
    "contracts": contracts_table,
    "known-failures": known_failures_table,
}


def targets() -> List[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def render(text: str, where: str = "", cache: Dict[str, str] | None = None) -> str:
    """`text` with every generated block rebuilt."""
    cache = {} if cache is None else cache

    def fill(m: re.Match) -> str:
        name = m.group(2)
        if name not in BLOCKS:
            raise ValueError(f"{where}: unknown generated block {name!r} (known: {', '.join(BLOCKS)})")
        if name not in cache:  # a blank line before the end marker, so the block's last table or list ends there
            cache[name] = BLOCKS[name]().rstrip("\n") + "\n\n"
        return m.group(1) + cache[name] + m.group(4)

    return _BLOCK.sub(fill, text)


def missing_blocks() -> List[str]:
    out = []
    for rel, names in REQUIRED.items():
        path = ROOT / rel
        found = {m.group(2) for m in _BLOCK.finditer(path.read_text())} if path.exists() else set()
        out += [f"{rel}: no generated block {n!r}" for n in names if n not in found]
    return out


def stale() -> List[str]:
    """The files (relative to the repository root) whose generated blocks differ from what would be generated now."""
    cache: Dict[str, str] = {}
    out = []
    for path in targets():
        text = path.read_text()
        if render(text, str(path), cache) != text:
            out.append(str(path.relative_to(ROOT)))
    return out


def write() -> List[str]:
    cache: Dict[str, str] = {}
    changed = []
    for path in targets():
        text = path.read_text()
        new = render(text, str(path), cache)
        if new != text:
            path.write_text(new)
            changed.append(str(path.relative_to(ROOT)))
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m contracts.docs", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 naming each stale file")
    args = parser.parse_args(argv)
    problems = missing_blocks()
    for line in problems:
        print(f"contracts.docs: {line}", file=sys.stderr)
    if args.check:
        for rel in stale():
            problems.append(rel)
            print(f"contracts.docs: {rel} is stale: run `python -m contracts.docs`", file=sys.stderr)
        return 1 if problems else 0
    for rel in write():
        print(f"contracts.docs: wrote {rel}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
