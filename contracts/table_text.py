"""The contract x result table as `check` prints it: one line per contract that ran, fitted to the terminal's width
(140 columns where the output is not a terminal: a CI log).

Known failures get one line (their ledger evidence is in the JSON, the HTML page and `--verbose`); skipped contracts
are summarised, one line per missing capability with the ids it covers; a new failure or a harness error keeps its
violation (wrapped) and its repro line (never wrapped: it is a command to paste); warnings come after, counted.
"""

from __future__ import annotations

import re
import textwrap
from itertools import groupby

from contracts.report import HARNESS_ERROR, placement_text, share_text

WIDTH = 140  # the width the table fits where the output is not a terminal (a log, a pipe)
_DETAILED = ("failed", HARNESS_ERROR)  # results whose evidence is printed under their row


def _fit(text: str, room: int) -> str:
    return text if len(text) <= room else text[:max(room - 3, 0)] + "..."


def id_ranges(ids) -> str:
    """`LOOP-001..003, PLAN-010`: runs of consecutive numbers under one prefix written as a range."""
    parts = []
    keyed = [(m.group(1), int(m.group(2)), i) if (m := re.fullmatch(r"(.*?)(\d+)", i)) else (i, None, i)
             for i in sorted(ids)]
    for prefix, group in groupby(keyed, key=lambda k: k[0]):
        group = list(group)
        run = [group[0]]
        for item in group[1:] + [None]:
            if item is not None and item[1] is not None and run[-1][1] is not None and item[1] == run[-1][1] + 1:
                run.append(item)
                continue
            first, last = run[0][2], run[-1][2]
            parts.append(first if len(run) == 1 else f"{first}..{last[len(prefix):]}")
            run = [item]
    return ", ".join(parts)


def _wrapped(head: str, body: str, indent: int, width: int = WIDTH) -> list:
    return textwrap.wrap(body, width, initial_indent=head, subsequent_indent=" " * indent,
                         break_on_hyphens=False, break_long_words=True) or [head]


def _grouped(heading: str, keyed, width: int = WIDTH) -> list:
    """`heading: N contract(s)`, then one wrapped line per key with the ids that have it (`key (n): ids`)."""
    groups: dict = {}
    for key, cid in keyed:
        groups.setdefault(key, []).append(cid)
    if not groups:
        return []
    out = [f"{heading}: {sum(map(len, groups.values()))} contract(s)"]
    for key, ids in sorted(groups.items()):
        out += _wrapped(f"  {key} ({len(ids)}): ", id_ranges(ids), 4, width)
    return out


def skip_lines(rows, capabilities, width: int = WIDTH) -> list:
    """One line per missing capability (or other skip reason) with the ids it covers."""
    def reason(r):
        missing = sorted(set(r.requires) - set(capabilities))
        return ("lacks " + ", ".join(missing)) if missing else (r.detail.removeprefix("Skipped: ") or "skipped")

    return _grouped("skipped", ((reason(r), r.id) for r in rows), width)


def share_lines(rows, width: int = WIDTH) -> list:
    """One line per share the pack declares (`example_shares`, `draw_shares`), with the ids that ran at it."""
    shares = ((share_text(r.example_share, r.draw_share), r.id) for r in rows)
    return _grouped("ran at the pack's share of their budget", ((text, cid) for text, cid in shares if text), width)


def table_lines(table, *, version_line: bool = False, verbose: bool = False, show_warnings: bool = False,
                brief: bool = False, width: int = WIDTH) -> list:
    """The table's lines, at most `width` columns (a repro line excepted: a command to paste stays whole). `brief`
    (among other tests, `pytest -m cpu`) lists only the rows to read, not the passed ones, which the counts cover."""
    info = table.engine_info
    out = []
    if info and version_line:
        out.append(info["version_line"])
    if info:
        out.append(f"engine={table.engine} {info['version']}: {placement_text(info['device'], info.get('backend'))}")
    rows = sorted(table.rows.values(), key=lambda r: r.id)
    shown = [r for r in rows if r.result != "skipped" and not r.hardening]
    hardening = [r for r in rows if r.hardening]
    listed = shown + hardening
    widths = (max([len("contract")] + [len(r.id) for r in listed]),
              max([len("result")] + [len(r.result) for r in listed]),
              max([len("time")] + [len(f"{r.seconds:.1f}s") for r in listed]))
    listed_rows = [r for r in shown if r.result != "passed"] if brief else shown
    if listed_rows or not brief:
        out.append(_row("contract", "result", "time", "statement", widths, width))
    for r in listed_rows:
        out.extend(_row_lines(r, widths, verbose, width))
    if brief:
        out.append(f"({len(shown) - len(listed_rows)} passed contracts not listed here; `dspark-contracts check` or "
                   "--contracts-verbose lists every row)")
    if hardening:
        out.append("hardening (inputs this engine's own producers never emit; not findings; run with --hardening):")
        for r in hardening:
            out.extend(_row_lines(r, widths, verbose, width))
    out.extend(skip_lines([r for r in rows if r.result == "skipped" and not r.hardening], info.get("capabilities") or [],
                          width))
    out.extend(share_lines([r for r in rows if r.result != "skipped"], width))
    out.extend(parameter_lines(info, width))
    out.extend(option_lines(info, width))
    c = table.counts()
    where = f" {info['version']} on {info['device']}" if info else ""
    extra = "".join(f", {c[k]} {label}" for k, label in ((HARNESS_ERROR, "harness errors"), ("hardening", "hardening not run"))
                    if c[k])
    out.append(f"engine={table.engine}{where}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped, "
               f"{c['known-failure']} known failures{extra}")
    if table.hypothesis:
        h = table.hypothesis
        # A seed is shown only where one was given: a random run's seed is Hypothesis' to print with a failure.
        seed = "derandomized" if h.get("derandomize") else ("random seed" if h.get("seed") is None else f"seed={h['seed']}")
        out.append(f"hypothesis: profile={h.get('profile')} ({seed}, max_examples={h.get('max_examples')})")
    out.extend(warning_lines(table.warnings, show_warnings, width))
    return out


def parameter_lines(info: dict, width: int = WIDTH) -> list:
    """The request parameters the engine accepts that no contract exercises here: a gap, not a green row."""
    if not info or info.get("unexercised_parameters") is None:
        return ["request parameters: the pack declares none its engine accepts (accepted_parameters)"] if info else []
    gap = info["unexercised_parameters"]
    if not gap:
        return [f"request parameters: all {len(info['accepted_parameters'])} the engine accepts are exercised"]
    return _wrapped("request parameters accepted but not exercised: ", ", ".join(gap), 4, width)


def option_lines(info: dict, width: int = WIDTH) -> list:
    """The engine's passive and output-preserving options the contracts do not turn on, with why, and those the
    engine has that its pack does not list."""
    if not info:
        return []
    out = []
    for name, why in sorted((info.get("options") or {}).items()):
        if why:
            out += _wrapped(f"option {name} not exercised: ", why, 4, width)
    if info.get("unlisted_options"):
        out += _wrapped("options the engine has that its pack does not list: ", ", ".join(info["unlisted_options"]), 4,
                        width)
    return out


def warning_lines(warnings, show: bool, width: int = WIDTH) -> list:
    """After the table: the warnings the run raised, counted; in full with `show` (check --show-engine-warnings)."""
    if not warnings:
        return []
    total = sum(w["count"] for w in warnings)
    head = f"warnings: {total} raised while the contracts ran ({len(warnings)} distinct)"
    if not show:
        first = warnings[0]
        return [_fit(f"{head}; --show-engine-warnings prints them; first: {first['category']}: "
                     f"{first['message'].splitlines()[0] if first['message'] else ''}", width)]
    out = [head + ":"]
    for w in sorted(warnings, key=lambda w: -w["count"]):
        out.append(f"  {w['count']}x {w['category']} at {w['where']}:")
        out.extend("    " + line for line in w["message"].splitlines())
    return out


def _row(cid, result, time, statement, widths, width: int = WIDTH) -> str:
    head = f"{cid:<{widths[0]}}  {result:<{widths[1]}}  {time:>{widths[2]}}  "
    return head + _fit(statement, width - len(head))


def _row_lines(r, widths, verbose: bool, width: int = WIDTH) -> list:
    out = [_row(r.id, r.result, f"{r.seconds:.1f}s", r.statement, widths, width)]
    if r.result not in _DETAILED and not (verbose and r.result == "known-failure"):
        return out
    indent = sum(widths) + 6
    if r.detail:
        out += _wrapped(" " * indent + "-> ", r.detail, indent + 3, width)
    if r.failure is not None and r.failure.where:
        out += _wrapped(" " * indent + "   raised at: ", r.failure.where, indent + 3, width)
    if r.failure is not None and r.failure.repro:
        out.append(" " * indent + "   repro: " + r.failure.repro)
    return out
