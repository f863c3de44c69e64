"""An offline conformance page: one self-contained HTML file (inline CSS and SVG, no script, nothing loaded).

Input: the conformance matrix (contracts.conformance), or the runs to build it from, as `ContractTable.as_dict()`
writes them (the `check --json` file), each optionally with a `step_sample` (contracts.step_sample). Output, in this
order: a summary strip (the counts per engine), every failure and harness error with its field, expected/observed,
shrunk case, repro line or traceback (a known failure with its finding), the engines (version, date, harness version,
placement, install line, what the run did not exercise), the contract x engine matrix (a failing cell links to its
failure, a known failure also to its finding's repro and draft report, a skipped cell names what the engine lacks),
and per engine the accept-length and verify-length histograms and tau per step. The only links that leave the page
are a finding's files and an engine's docs page, relative to the page (or under `link_base`).
"""

from __future__ import annotations

import os
from collections import Counter
from html import escape
from pathlib import Path

from contracts import conformance
from contracts.conformance import RESULTS
from contracts.report import placement_text, share_text

_LINKED = ("failed", "known-failure", "harness-error")  # cells that link to their details
_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}h3{font-size:15px}
table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}tbody th{white-space:nowrap}td.statement{max-width:560px;font-size:12px;color:#444}
td.passed{background:#e3f5e1}td.failed{background:#f9d6d5;font-weight:bold}
td.known-failure{background:#fdf0c8}
td.harness-error{background:#f3d9f7;font-weight:bold}td a{color:inherit}
td .why,td .share,td .finding{display:block;font-size:11px;color:#555}
table.engines td{font-size:12px;max-width:420px}table.engines pre{font-size:11px}
.strip{display:flex;flex-wrap:wrap;gap:10px;margin:8px 0 4px}.strip .run{border:1px solid #ccc;padding:6px 10px}
.strip .name{font-weight:bold;margin-right:6px}.count{display:inline-block;padding:1px 6px;margin:2px;border-radius:3px}
.count.passed{background:#e3f5e1}.count.failed{background:#f9d6d5}.count.known-failure{background:#fdf0c8}
.count.hardening{background:#e6eefc}.count.skipped{background:#ececec}.count.harness-error{background:#f3d9f7}
.failure{border-left:4px solid #d99;padding-left:8px;margin:8px 0}.failure.known-failure{border-color:#e5c76b}
td.skipped{background:#ececec;color:#666}td.hardening{background:#e6eefc;color:#445}td.absent{color:#aaa}
.version{font-family:monospace}.untested{background:#fdf0c8}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px}dt{font-weight:bold}dd{margin:0}
pre{white-space:pre-wrap;word-break:break-all;background:#f7f7f7;padding:4px;margin:0}
.charts{display:flex;flex-wrap:wrap;gap:16px}.note{color:#666}
"""


def bar_chart(title: str, labels, values, *, x_label: str = "", y_label: str = "count", width: int = 380,
              height: int = 220) -> str:
    """An inline SVG bar chart with one bar per label, its value written above it."""
    labels, values = [str(x) for x in labels], [float(v) for v in values]
    if len(labels) != len(values) or not labels:
        raise ValueError(f"labels/values: expected equal, non-empty lengths, got {len(labels)} and {len(values)}")
    left, bottom, top = 40, 44, 36  # room above the tallest bar for its value label, below the title
    plot_w, plot_h = width - left - 10, height - bottom - top
    peak = max(max(values), 1e-9)
    slot = plot_w / len(values)
    parts = [f'<svg class="chart" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
             f'<title>{escape(title)}</title>',
             f'<text x="{width / 2:.0f}" y="16" text-anchor="middle" font-size="13">{escape(title)}</text>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#888"/>',
             f'<text transform="rotate(-90)" x="{-(top + plot_h / 2):.0f}" y="14" text-anchor="middle" font-size="11" '
             f'fill="#444">{escape(y_label)}</text>']
    for i, (label, value) in enumerate(zip(labels, values)):
        h = plot_h * value / peak
        x = left + i * slot + slot * 0.15
        parts.append(f'<rect class="bar" x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{slot * 0.7:.1f}" '
                     f'height="{h:.1f}" fill="#4a7fc1"><title>{escape(label)}: {value:g}</title></rect>')
        parts.append(f'<text x="{x + slot * 0.35:.1f}" y="{top + plot_h - h - 3:.1f}" text-anchor="middle" '
                     f'font-size="10">{value:.3g}</text>')
        parts.append(f'<text x="{x + slot * 0.35:.1f}" y="{top + plot_h + 14:.1f}" text-anchor="middle" '
                     f'font-size="10">{escape(label)}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.0f}" y="{height - 6}" text-anchor="middle" font-size="11" '
                 f'fill="#444">{escape(x_label)}</text></svg>')
    return "".join(parts)


def _histogram(title: str, values, low: int, high: int, x_name: str) -> str:
    counts = Counter(values)
    return bar_chart(f"{title} (n={len(values)})", range(low, high + 1),
                     [counts.get(k, 0) for k in range(low, high + 1)], x_label=x_name)


def step_charts(sample) -> str:
    """The step-level pictures of one run, or a line saying why there are none."""
    if not sample:
        return '<p class="note">no step sample (run `check --html` to take one)</p>'
    if "skipped" in sample:
        return f'<p class="note">{escape(sample["skipped"])}</p>'
    steps, gamma = sample.get("steps", []), int(sample.get("gamma", 0))
    frac = sample.get("budget_frac")
    budget = "no forced budget" if frac is None else f"budget fraction {frac}"
    out = [f'<p class="note">{sample.get("requests")} greedy requests, gamma {gamma}, {escape(str(sample.get("verify_mode")))} '
           f'mode, {budget}, {len(steps)} steps.</p>']
    if sample.get("error"):
        out.append(f'<p class="note">the step run stopped: {escape(sample["error"])}</p>')
    if steps:
        accept = [a for s in steps for a in s["accept_lens"]]
        verify = [v for s in steps for v in s["verify_lens"]]
        taus = [round(float(s["tau"]), 3) for s in steps]
        out.append('<div class="charts">')
        out.append(_histogram("accept lengths", accept, 0, gamma, "accepted drafts per request-step"))
        out.append(_histogram("verify lengths", verify, 1, gamma + 1, "L per request-step"))
        out.append(bar_chart(f"tau per step (mean {sum(taus) / len(taus):.2f})", range(1, len(taus) + 1), taus,
                             x_label="step", y_label="tokens per target forward"))
        out.append("</div>")
    return "".join(out)



def _anchor(run_index: int, cid: str) -> str:
    return f"f{run_index}-{cid}"


def _href(path: str, base: str) -> str:
    return escape(base + path, quote=True)


def _finding_links(finding, base: str) -> str:
    links = [f'<a href="{_href(finding["repro"], base)}">repro</a>']
    if finding.get("report"):
        links.append(f'<a href="{_href(finding["report"], base)}">report</a>')
    return " ".join(links)


def _cell(cell, index: int, cid: str, base: str) -> str:
    result = cell["result"]
    text = escape(result)
    if result in _LINKED:
        text = f'<a href="#{_anchor(index, cid)}">{text}</a>'
    why = ""
    if result == "skipped":
        missing = cell.get("missing")
        why = "lacks " + ", ".join(missing) if missing else (cell.get("detail") or "").removeprefix("Skipped: ")
    elif result == "hardening":
        why = "not run (hardening)"
    share = share_text(float(cell.get("example_share", 1)), float(cell.get("draw_share", 1)))
    why = f'<span class="why">{escape(why)}</span>' if why else ""
    why += f'<span class="share">{escape(share)}</span>' if share else ""
    if result == "known-failure" and "finding" in cell:
        finding = cell["finding"]
        why += (f'<span class="finding">{_finding_links(finding, base)}</span>' if finding else
                '<span class="finding">not a finding (ledger: by design)</span>')
    tip = f' title="{escape(cell["detail"])}"' if cell.get("detail") else ""
    return f'<td class="{escape(result)}"{tip}>{text} <small>{float(cell.get("seconds", 0)):.1f}s</small>{why}</td>'


def _matrix(matrix, names, base: str) -> str:
    head = "".join(f"<th>{escape(n)}</th>" for n in names)
    rows = [f'<table class="matrix"><thead><tr><th>contract</th>{head}<th>statement</th></tr></thead><tbody>']
    for c in matrix["contracts"]:
        cells = ['<td class="absent">not run</td>' if c["cells"].get(n) is None else _cell(c["cells"][n], i, c["id"], base)
                 for i, n in enumerate(names)]
        rows.append(f'<tr id="{escape(c["id"])}"><th>{escape(c["id"])}</th>{"".join(cells)}'
                    f'<td class="statement">{escape(c.get("statement") or "")}</td></tr>')
    rows.append("</tbody></table>")
    return "".join(rows)


def _failures(matrix, name, index: int, base: str) -> str:
    order = {"failed": 0, "harness-error": 1, "known-failure": 2}  # new failures first
    bad = [{"id": c["id"], **c["cells"][name]} for c in matrix["contracts"]
           if c["cells"].get(name) is not None and c["cells"][name]["result"] in order]
    if not bad:
        return ""
    out = [f"<h3>{escape(name)}: failures</h3>"]
    for r in sorted(bad, key=lambda r: (order[r["result"]], r["id"])):
        out.append(f'<div class="failure {escape(r["result"])}" id="{_anchor(index, r["id"])}">'
                   f'<h4><a href="#{escape(r["id"])}">{escape(r["id"])}</a> ({escape(r["result"])})</h4><dl>')
        out.append(f"<dt>detail</dt><dd>{escape(r.get('detail') or '')}</dd>")
        f = r.get("failure") or {}
        for key in ("field", "expected", "observed", "where", "case", "repro"):
            if f.get(key):
                out.append(f"<dt>{key}</dt><dd><pre>{escape(f[key])}</pre></dd>")
        finding = r.get("finding")
        if finding:
            out.append(f"<dt>finding</dt><dd>{_finding_links(finding, base)}: <code>{escape(finding['repro'])}</code>"
                       + "".join(f"<br>{k}: {escape(finding[k])}" for k in ("status", "severity", "path") if finding.get(k))
                       + "</dd>")
        if r.get("traceback"):
            out.append(f"<dt>traceback</dt><dd><pre>{escape(r['traceback'])}</pre></dd>")
        out.append("</dl></div>")
    return "".join(out)


def _summary(engines, names) -> str:
    """The strip at the top: per engine, how many contracts had each result."""
    out = ['<div class="strip">']
    for run, name in zip(engines, names):
        counts = run.get("counts") or {}
        shown = [k for k in RESULTS if k != "harness-error" or counts.get(k)]
        badges = "".join(f'<span class="count {k}">{counts.get(k, 0)} {"known" if k == "known-failure" else k}</span>'
                         for k in shown)
        out.append(f'<div class="run"><span class="name">{escape(name)}</span>{badges}</div>')
    out.append("</div>")
    return "".join(out)


def _version_line(run) -> str:
    """The engine's version line (`engine sglang 0.5.23`, or `... (untested; tested: ...)`), marked when untested;
    empty for a run written before `check` recorded it."""
    line = run.get("engine_version_line")
    if not line:
        return ""
    untested = " untested" if run.get("engine_tested") is False else ""
    return f'<span class="version{untested}">{escape(line)}</span>'


def _install(run, base: str) -> str:
    install = run.get("install")
    if not install:
        return '<span class="note">no docs page in this checkout</span>'
    command = f"<pre>{escape(install['command'])}</pre>" if install.get("command") else ""
    return f'<a href="{_href(install["doc"], base)}">{escape(install["doc"])}</a>{command}'


def _hypothesis(run) -> str:
    h = run.get("hypothesis") or {}
    seed = "derandomized" if h.get("derandomize") else f"seed {h.get('seed') or 'random'}"
    return escape(f"{h.get('profile')} ({seed}, max_examples {h.get('max_examples')})")


def _parameters(run) -> str:
    """Request parameters the engine accepts by its pack's word that no contract exercised on it."""
    if "unexercised_parameters" not in run:  # a run that predates the field
        return ""
    gap = run.get("unexercised_parameters")
    if gap is None:
        return '<span class="note">none declared</span>'
    return f'<span class="gap">{escape(", ".join(gap))}</span>' if gap else "none"


def _options(run) -> str:
    """The pack's declared options the contracts do not turn on (the reason as a tip), and its engine's options the
    pack does not list."""
    if "options" not in run:
        return ""
    idle = sorted((name, why) for name, why in (run.get("options") or {}).items() if why)
    out = ", ".join(f'<span class="gap" title="{escape(why)}">{escape(name)}</span>' for name, why in idle) or "none"
    if run.get("unlisted_options"):
        out += f'; <span class="gap">not listed by the pack: {escape(", ".join(run["unlisted_options"]))}</span>'
    return out


def _engines(engines, names, base: str) -> str:
    """One column per engine: what made the run, and what it did not exercise."""
    fields = [
        ("version", _version_line),
        ("run", lambda r: escape(r.get("date") or "")),
        ("harness", lambda r: escape(f"dspark-contracts {r['harness_version']}") if r.get("harness_version") else ""),
        ("where", lambda r: escape(placement_text(r.get("engine_device") or "?", r.get("engine_backend")))),
        ("install", lambda r: _install(r, base)),
        ("Hypothesis", _hypothesis),
        ("results", lambda r: escape(", ".join(f"{(r.get('counts') or {}).get(k, 0)} {k}" for k in RESULTS
                                               if k != "harness-error" or (r.get("counts") or {}).get(k)))),
        ("capabilities", lambda r: escape(", ".join(r.get("capabilities") or []) or "?")),
        ("request parameters accepted, not exercised", _parameters),
        ("options not exercised", _options),
        ("from", lambda r: escape(r.get("source") or "")),
    ]
    head = "".join(f"<th>{escape(n)}</th>" for n in names)
    rows = [f'<table class="engines"><thead><tr><th></th>{head}</tr></thead><tbody>']
    for label, show in fields:
        rows.append(f"<tr><th>{escape(label)}</th>" + "".join(f"<td>{show(r)}</td>" for r in engines) + "</tr>")
    rows.append("</tbody></table>")
    return "".join(rows)


def matrix_of(runs) -> dict:
    """A matrix as given (checked), or the one built from `runs`."""
    if isinstance(runs, dict) and "format" in runs:
        return conformance.check_matrix(runs, "matrix")
    return conformance.build(runs)


def render(runs, link_base: str = "") -> str:
    """The whole page as one string, from the matrix or the runs to build it from; `link_base` is put before a
    finding's or docs page's repository path (a page at the repository's root needs none)."""
    matrix = matrix_of(runs)
    engines = matrix["engines"]
    names = [e["column"] for e in engines]
    made = f"{len(engines)} engine(s), {len(matrix['contracts'])} contracts; made {matrix.get('date')} by " \
           f"dspark-contracts {matrix.get('harness_version')}"
    parts = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             "<title>dspark-contracts conformance</title>", f"<style>{_CSS}</style></head><body>",
             "<h1>dspark-contracts conformance</h1>", f'<p class="note">{escape(made)}</p>', _summary(engines, names),
             "<h2 id=\"failures\">Failures</h2>"]
    failures = [_failures(matrix, n, i, link_base) for i, n in enumerate(names)]
    parts.append("".join(failures) or '<p class="note">none</p>')
    parts += ["<h2>Engines</h2>", _engines(engines, names, link_base), "<h2>Contracts</h2>",
              _matrix(matrix, names, link_base)]
    parts.append("<h2>Step level</h2>")
    for run, n in zip(engines, names):
        parts.append(f'<section class="steps"><h3>{escape(n)}</h3>{step_charts(run.get("step_sample"))}</section>')
    measured = [(run, n) for run, n in zip(engines, names) if run.get("coverage")]
    if measured:
        parts.append("<h2>Engine-code coverage</h2>")
        parts.extend(_coverage(run["coverage"], n) for run, n in measured)
    parts.append("</body></html>")
    return "\n".join(parts)


def _coverage(rows, name) -> str:
    """`check --coverage`: statements and branches of each module the pack declares as its engine's DSpark code."""
    body = "".join(f"<tr><td>{escape(r['module'])}</td><td>{r['statements']}</td><td>{r['percent']:.0f}%</td>"
                   f"<td>{r['branches']}</td><td>{r['branch_percent']:.0f}%</td></tr>" for r in rows)
    return (f'<section class="coverage"><h3>{escape(name)}</h3><table><tr><th>module</th><th>statements</th>'
            f"<th>covered</th><th>branches</th><th>covered</th></tr>{body}</table></section>")


def link_base_for(path: str) -> str:
    """The repository's root as seen from the folder the page is written to (`../../` for .ci/artifacts/)."""
    rel = os.path.relpath(conformance.ROOT, Path(path).resolve().parent).replace(os.sep, "/")
    return "" if rel == "." else rel + "/"


def write_html(path: str, runs, link_base=None) -> None:
    text = render(runs, link_base_for(path) if link_base is None else link_base)  # first: a bad run writes nothing
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
