"""`dspark-contracts`: run the packaged contracts against an engine and print the table."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

SUITE = Path(__file__).parent / "suite"


def _check(args) -> int:
    import pytest

    from contracts.engines import EngineLoadError, chosen_engine, load_engine

    spec = chosen_engine(args.engine)
    try:  # fail fast with one line, before pytest starts
        load_engine(spec)
    except EngineLoadError as e:
        print(f"dspark-contracts: {e}", file=sys.stderr)
        return 4
    json_path = args.json or os.path.join(tempfile.mkdtemp(prefix="dspark-contracts-"), "results.json")
    pytest_args = [str(SUITE), "-c", str(SUITE / "check.ini"), "--rootdir", str(SUITE), "--engine", spec,
                   "--contracts-json", json_path, "-q", "--no-header", "-p", "no:randomly"]
    for cid in args.contract:
        pytest_args += ["--contract", cid]
    if args.profile:
        pytest_args += ["--hypothesis-profile", args.profile]
    if args.workers:
        pytest_args += ["-n", str(args.workers)]
    code = int(pytest.main(pytest_args))
    if code == 5 or not os.path.exists(json_path):
        print(f"dspark-contracts: no contract ran (ids: {args.contract or 'all'})", file=sys.stderr)
        return 5
    counts = json.load(open(json_path))["counts"]
    return 0 if code == 0 and counts["failed"] == 0 else 1


def _list(args) -> int:
    from contracts.registry import all_contracts

    for c in all_contracts().values():
        print(f"{c.id:<12} [{', '.join(sorted(c.requires))}] {c.statement}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dspark-contracts", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="run the contracts against an engine and print the contract x result table")
    check.add_argument("--engine", help="entry point name or module:factory (default: $DSPARK_ENGINE, else reference)")
    check.add_argument("--json", help="also write the table as JSON to this path")
    check.add_argument("--contract", action="append", default=[], metavar="ID", help="only this contract (repeatable)")
    check.add_argument("--profile", choices=("dev", "ci", "nightly"), help="Hypothesis profile (default: ci under CI, else dev)")
    check.add_argument("-n", "--workers", help="run on N pytest-xdist workers ('auto' for one per core)")
    check.set_defaults(func=_check)
    sub.add_parser("list", help="list the contracts").set_defaults(func=_list)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
