"""The README table of the GPU verify benchmarks, from the JSON `test_bench_verify.py` writes (DSPARK_BENCH_JSON).

    python tests/gpu/bench_summary.py bench_results/verify.json

One row per (benchmark, implementation): median time, achieved bandwidth over the op's minimum byte count, that
as a fraction of the device-to-device copy measured in the same run, and for Triton the issue's two goals
(>= 0.80 of the copy bandwidth; no slower than FlashInfer where FlashInfer has the op).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

IMPLS = ("triton", "flashinfer", "torch_eager", "torch_argmax_only")
BANDWIDTH_GOAL = 0.80


def _goals(row: dict) -> str:
    ours, theirs = row.get("triton"), row.get("flashinfer")
    if not isinstance(ours, dict):
        return ""
    out = [f"bandwidth {'met' if ours['fraction_of_copy_bw'] >= BANDWIDTH_GOAL else 'missed'}"]
    if isinstance(theirs, dict):
        out.append("vs FlashInfer " + ("no slower" if ours["median_us"] <= theirs["median_us"] else "slower"))
    return "; ".join(out)


def table(data: dict) -> str:
    keys = sorted(k for k in data if k.startswith("gpu_"))
    if not keys:
        return "no GPU benchmark results"
    lines = ["| benchmark (bs=1024, gamma=5, V=129280) | impl | median us | GB/s | fraction of copy bandwidth | goals |",
             "|---|---|---|---|---|---|"]
    for key in keys:
        row = data[key]
        for impl in IMPLS:
            cell = row.get(impl)
            if cell is None:
                continue
            if isinstance(cell, str):  # "n/a: ..." (FlashInfer has no greedy verify, or is not installed)
                lines.append(f"| {key} | {impl} | {cell} | | | |")
            else:
                goals = _goals(row) if impl == "triton" else ""
                lines.append(f"| {key} | {impl} | {cell['median_us']:.1f} | {cell['gb_per_s']:.0f} | "
                             f"{cell['fraction_of_copy_bw']:.2f} | {goals} |")
        lines.append(f"| {key} | d2d copy | | {row['copy_bw_gb_per_s']:.0f} | 1.00 | |")
    env = data[keys[-1]].get("env", {})
    lines.append("")
    lines.append("measured on " + ", ".join(f"{k} {v}" for k, v in sorted(env.items())))
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python tests/gpu/bench_summary.py VERIFY.json", file=sys.stderr)
        return 2
    path = Path(argv[0])
    if not path.exists():
        print(f"no benchmark results ({path} does not exist)")
        return 0
    print(table(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
