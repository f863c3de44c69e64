"""The fast-feedback timings of docs/performance.md, with a floor taken in the same run.

    CI=true python scripts/timings.py [--skip pytest] [--skip check] [--skip sglang]

`pytest -m cpu`'s goal is for the README's install (no SGLang, whose meta-tests it would collect): time it there
with `--skip sglang`, and the SGLang check where SGLang is installed with `--skip pytest --skip check`.

Each command runs once, after the floor (`python -c "import torch"`, median of three) is measured, so a loaded
machine shows as a slower floor rather than as a missed goal alone. Prints a Markdown table to paste.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import statistics
import subprocess
import sys
import time

FLOOR = [sys.executable, "-c", "import torch"]
# (name, what, command, goal in seconds on the project's 2-core machine: issue 24)
RUNS = (
    ("pytest", "`pytest -m cpu`, serial", ["pytest", "-m", "cpu", "-q", "-p", "no:cacheprovider"], 60),
    ("check", "`dspark-contracts check`", ["dspark-contracts", "check"], 20),
    ("sglang", "`dspark-contracts check --engine sglang`", ["dspark-contracts", "check", "--engine", "sglang"], 180),
)


def wall(cmd) -> float:
    t0 = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"timings: {' '.join(cmd)} exited {done.returncode}: a failing run is not a timing")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip", action="append", default=[], choices=[r[0] for r in RUNS], help="leave a row out")
    args = parser.parse_args()
    runs = [r for r in RUNS if r[0] not in args.skip]
    if "sglang" not in args.skip and importlib.util.find_spec("sglang") is None:
        raise SystemExit("timings: SGLang is not installed (bash scripts/install_sglang.sh), or pass --skip sglang")
    floor = statistics.median(wall(FLOOR) for _ in range(3))
    print(f"{datetime.date.today()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start; "
          f"floor `python -c \"import torch\"` {floor:.2f} s")
    print("\n| command | wall time | / floor | goal | met |\n|---|---|---|---|---|")
    for _, what, cmd, goal in runs:
        seconds = wall(cmd)
        print(f"| {what} | {seconds:.0f} s | {seconds / floor:.0f}x | <= {goal} s | {'yes' if seconds <= goal else 'no'} |",
              flush=True)


if __name__ == "__main__":
    main()
