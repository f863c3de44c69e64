"""An offline conformance page: one self-contained HTML file (inline CSS and SVG, no script, no links out).

Input: one or more runs as `ContractTable.as_dict()` writes them (the `check --json`
file), each optionally with a `step_sample` (contracts.step_sample). Output, in this
order: a summary strip (the counts per run), every failure and harness error with its
field, expected/observed, shrunk case, repro line or traceback, the contract x engine
matrix (one column per run; a failing cell links to its failure, a skipped cell says
why), and per run the accept-length and verify-length histograms and tau per step.
"""

from __future__ import annotations

from collections import Counter
from html import escape

from contracts.report import placement_text, share_text

RESULTS = ("passed", "failed", "known-failure", "hardening", "skipped", "harness-error")
_LINKED = ("failed", "known-failure", "harness-error")  # cells that link to their details
_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}h3{font-size:15px}
table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}tbody th{white-space:nowrap}td.statement{max-width:560px;font-size:12px;color:#444}
td.passed{background:#e3f5e1}td.failed{background:#f9d6d5;font-weight:bold}
td.known-failure{background:#fdf0c8}
td.harness-error{background:#f3d9f7;font-weight:bold}td a{color:inherit}td .why,td .share{display:block;font-size:11px;color:#555}
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


def _check_runs(runs) -> list:
    runs = list(runs)
    if not runs:
        raise ValueError("runs: expected at least one run")
    for i, run in enumerate(runs):
        if not isinstance(run, dict) or "contracts" not in run or "engine" not in run:
            raise ValueError(f"runs[{i}]: expected a `check --json` result with 'engine' and 'contracts'")
    return runs


def _column_names(runs) -> list:
    names = []
    for run in runs:
        name = run["engine"] + (f" {run['engine_version']}" if run.get("engine_version") else "")
        where = (run.get("engine_device"), run.get("engine_backend"))
        if where[1] and where != ("cpu", "torch"):  # e.g. the same engine's CPU run next to its Triton run
            name += f" {where[0]}/{where[1]}"
        names.append(name if name not in names else f"{name} (run {len(names) + 1})")
    return names


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


def _skip_reason(row, run) -> str:
    """Why a contract was skipped: the capabilities the engine lacks, else the skip's own words."""
    missing = sorted(set(row.get("requires") or ()) - set(run.get("capabilities") or ()))
    if missing:
        return "lacks " + ", ".join(missing)
    return (row.get("detail") or "").removeprefix("Skipped: ")


def _cell(row, run, run_index: int) -> str:
    result = row["result"]
    text = escape(result)
    if result in _LINKED:
        text = f'<a href="#{_anchor(run_index, row["id"])}">{text}</a>'
    why = ""
    if result == "skipped":
        why = _skip_reason(row, run)
    elif result == "hardening":
        why = "not run (hardening)"
    share = share_text(float(row.get("example_share", 1)), float(row.get("draw_share", 1)))
    why = f'<span class="why">{escape(why)}</span>' if why else ""
    why += f'<span class="share">{escape(share)}</span>' if share else ""
    tip = f' title="{escape(row["detail"])}"' if row.get("detail") else ""
    return f'<td class="{escape(result)}"{tip}>{text} <small>{float(row["seconds"]):.1f}s</small>{why}</td>'


def _matrix(runs, names) -> str:
    ids = sorted({r["id"] for run in runs for r in run["contracts"]})
    by_run = [{r["id"]: r for r in run["contracts"]} for run in runs]
    statements = {r["id"]: r["statement"] for run in runs for r in run["contracts"]}
    head = "".join(f"<th>{escape(n)}</th>" for n in names)
    rows = [f'<table class="matrix"><thead><tr><th>contract</th>{head}<th>statement</th></tr></thead><tbody>']
    for cid in ids:
        cells = []
        for i, (table, run) in enumerate(zip(by_run, runs)):
            row = table.get(cid)
            cells.append('<td class="absent">not run</td>' if row is None else _cell(row, run, i))
        rows.append(f'<tr id="{escape(cid)}"><th>{escape(cid)}</th>{"".join(cells)}'
                    f'<td class="statement">{escape(statements[cid])}</td></tr>')
    rows.append("</tbody></table>")
    return "".join(rows)


def _failures(run, name, run_index: int) -> str:
    order = {"failed": 0, "harness-error": 1, "known-failure": 2}  # new failures first
    bad = sorted((r for r in run["contracts"] if r["result"] in order), key=lambda r: (order[r["result"]], r["id"]))
    if not bad:
        return ""
    out = [f"<h3>{escape(name)}: failures</h3>"]
    for r in bad:
        out.append(f'<div class="failure {escape(r["result"])}" id="{_anchor(run_index, r["id"])}">'
                   f'<h4><a href="#{escape(r["id"])}">{escape(r["id"])}</a> ({escape(r["result"])})</h4><dl>')
        out.append(f"<dt>detail</dt><dd>{escape(r.get('detail') or '')}</dd>")
        f = r.get("failure") or {}
        for key in ("field", "expected", "observed", "where", "case", "repro"):
            if f.get(key):
                out.append(f"<dt>{key}</dt><dd><pre>{escape(f[key])}</pre></dd>")
        if r.get("traceback"):
            out.append(f"<dt>traceback</dt><dd><pre>{escape(r['traceback'])}</pre></dd>")
        out.append("</dl></div>")
    return "".join(out)


def _summary(runs, names) -> str:
    """The strip at the top: per run, how many contracts had each result."""
    out = ['<div class="strip">']
    for run, name in zip(runs, names):
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
    return f'<span class="version{untested}">{escape(line)}</span>; '


def _run_info(run, name) -> str:
    c, h = run.get("counts", {}), run.get("hypothesis") or {}
    seed = "derandomized" if h.get("derandomize") else f"seed {h.get('seed') or 'random'}"
    caps = ", ".join(run.get("capabilities") or []) or "?"
    where = placement_text(run.get("engine_device") or "?", run.get("engine_backend"))
    return (f"<li><b>{escape(name)}</b>: {_version_line(run)}{escape(where)}; capabilities: {escape(caps)}; "
            f"Hypothesis profile {escape(str(h.get('profile')))} ({seed}, max_examples {h.get('max_examples')}); "
            + ", ".join(f"{c.get(k, 0)} {k}" for k in RESULTS if k != "harness-error" or c.get(k)) + "</li>")


def render(runs) -> str:
    """The whole page as one string."""
    runs = _check_runs(runs)
    names = _column_names(runs)
    parts = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             "<title>dspark-contracts conformance</title>", f"<style>{_CSS}</style></head><body>",
             "<h1>dspark-contracts conformance</h1>", _summary(runs, names), "<h2 id=\"failures\">Failures</h2>"]
    failures = [_failures(run, n, i) for i, (run, n) in enumerate(zip(runs, names))]
    parts.append("".join(failures) or '<p class="note">none</p>')
    parts += ["<h2>Runs</h2>", "<ul class=\"runs\">", *(_run_info(run, n) for run, n in zip(runs, names)), "</ul>",
              "<h2>Contracts</h2>", _matrix(runs, names)]
    parts.append("<h2>Step level</h2>")
    for run, n in zip(runs, names):
        parts.append(f'<section class="steps"><h3>{escape(n)}</h3>{step_charts(run.get("step_sample"))}</section>')
    measured = [(run, n) for run, n in zip(runs, names) if run.get("coverage")]
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


def write_html(path: str, runs) -> None:
    text = render(runs)  # rendered first: a bad run leaves no half-written page
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
