"""`dspark-contracts`: run the packaged contracts against an engine and print the table."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

SUITE = Path(__file__).parent / "suite"
OK, FAILED, BAD_ARGS, NOTHING_RAN, ENGINE_ERROR = 0, 1, 2, 3, 4
EXIT_CODES = """exit codes:
  0  no contract failed, and at least one ran (passed, or failed as the known-failures ledger says)
  1  a contract failed (or pytest stopped on an internal error), or a report or stdout could not be written
  2  bad arguments: unknown contract id or capability, bad -n, pytest-xdist missing, unusable output path,
     --device cuda without CUDA, a --backend this machine cannot run, or a --device/--backend the engine does not take
  3  nothing ran: every selected contract was skipped (pass --allow-skips to accept that),
     or a --require'd capability had a contract skipped or none at all
  4  the engine could not be loaded, or its adapter is invalid (unknown capability, missing methods)
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, like every other error of this command
        print(f"{self.prog}: {message} (see --help)", file=sys.stderr)
        sys.exit(BAD_ARGS)


class _StdoutFailed(Exception):
    """stdout could not be written (`list > /dev/full`), as opposed to an OSError of the engine or a report."""


def _out(line: str = "", flush: bool = False) -> None:
    try:
        if line:
            print(line)
        if flush:
            sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise _StdoutFailed(e.strerror or str(e)) from e


def _fail(message: str, code: int) -> int:
    print(f"dspark-contracts: {message}", file=sys.stderr)
    return code


def _write_failed(e: OSError, path: str) -> int:
    """A report that could not be written (a full disk): one line naming the file, exit 1."""
    return _fail(f"could not write {e.filename or path}: {e.strerror or e}", FAILED)


def _output_path(flag: str, path, read_back: bool = False):
    """An output file whose folder exists: checked before anything runs or is written. One the run reads back
    (`--json`) must be a regular file: on /dev/stdout piped on, the run would wait on its own pipe."""
    if path is None:
        return None
    if not path:
        raise ValueError(f"{flag}: empty path, expected a file path")
    p = Path(path)
    if read_back and p.exists() and not p.is_dir() and not p.is_file():
        raise ValueError(f"{flag}: {path!r} is not a regular file; the run reads its JSON back, so write it to a file")
    if p.is_dir():
        raise ValueError(f"{flag}: {path!r} is a directory, expected a file path")
    if not p.parent.is_dir():
        raise ValueError(f"{flag}: the folder {str(p.parent)!r} does not exist")
    return str(p)


def _validate(args) -> None:
    """Every argument, before pytest or the engine is imported; raises ValueError naming the flag."""
    from contracts import profiles, validation
    from contracts.registry import all_contracts

    if args.workers is not None:
        args.workers = validation.workers(args.workers)
    args.placement = validation.placement(args.device, args.backend)
    args.contract = validation.contract_ids(args.contract, all_contracts())
    args.require = [validation.capability(level) for level in args.require]
    if args.durations is not None and args.durations < 0:
        raise ValueError(f"--durations: expected N >= 0 (0 = all), got {args.durations}")
    for flag in ("json", "html", "junitxml"):
        setattr(args, flag, _output_path(f"--{flag}", getattr(args, flag), read_back=flag == "json"))
    if args.hypothesis_seed is not None:
        profile = args.profile or profiles.default_profile()
        if profile == "ci":  # Hypothesis ignores a seed when derandomize is on; say so rather than ignore it
            raise ValueError("--hypothesis-seed: the 'ci' profile is derandomized and ignores a seed; "
                             "add --profile dev or --profile nightly")


def _pytest_args(args, spec: str, json_path: str) -> list:
    out = [str(SUITE), "-c", str(SUITE / "check.ini"), "--rootdir", str(SUITE), "--engine", spec,
           "--contracts-json", json_path, "-q", "--no-header", "-p", "no:randomly",
           # This process imported hypothesis and the plugin already (argument checks, engine load); neither
           # needs assertion rewriting, so pytest's warning about it is noise.
           "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    for cid in args.contract:
        out += ["--contract", cid]
    out += ["--contracts-device", args.placement.device, "--contracts-backend", args.placement.requested]
    if args.profile:
        out += ["--hypothesis-profile", args.profile]
    if args.hypothesis_seed is not None:
        out += ["--hypothesis-seed", str(args.hypothesis_seed)]
    if args.workers:
        out += ["-n", args.workers]
    if args.junitxml:
        out += ["--junitxml", args.junitxml]
    if args.durations is not None:
        out += [f"--durations={args.durations}"]
    out += ["--tb", args.tb]
    if args.progress if args.progress is not None else sys.stdout.isatty():
        out += ["--contracts-progress", "-o", "console_output_style=classic"]  # lines, not dots and [NN%]
    return out


def exit_code(data: dict, require=(), allow_skips: bool = False) -> tuple:
    """(code, message) for a finished run's JSON, by the table in EXIT_CODES."""
    rows, counts = data["contracts"], data["counts"]
    if counts["failed"]:
        failed = [r["id"] for r in rows if r["result"] == "failed"]
        return FAILED, f"{len(failed)} contract(s) failed: {', '.join(failed)}"
    for level in require:
        needing = [r for r in rows if level in r.get("requires", ())]
        skipped = [r["id"] for r in needing if r["result"] == "skipped"]
        if not needing:
            return NOTHING_RAN, f"--require {level}: no contract requiring it ran"
        if skipped:
            return NOTHING_RAN, f"--require {level}: skipped {', '.join(skipped)}"
    ran = counts["passed"] + counts["known-failure"]
    if ran == 0 and not allow_skips:
        return NOTHING_RAN, (f"nothing ran on engine {data['engine']}: {counts['skipped']} skipped, 0 passed "
                                "(--allow-skips accepts that)")
    return OK, ""


def _one_torch_thread() -> None:
    """Contract cases are tiny tensors, for which torch's intra-op thread pool costs more than it saves: with
    one thread the check needs about 2.5x less CPU, and on a busy 2-core machine it finishes 1.5-3x sooner.
    An explicit OMP_NUM_THREADS wins."""
    if os.environ.get("OMP_NUM_THREADS"):
        return
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by xdist workers and DP rank processes
    import torch

    torch.set_num_threads(1)  # this process imported torch already (the argument checks load the catalog)


@contextlib.contextmanager
def _placement_env(where):
    """$DSPARK_DEVICE / $DSPARK_BACKEND (and TRITON_INTERPRET=1 for the interpreter) while the check runs: the
    adapter, xdist workers and rank processes all read them. Restored afterwards (main() may run in-process)."""
    from contracts.validation import placement_env, restore_env, set_env

    saved = set_env(placement_env(where))  # before anything imports the kernels
    try:
        yield
    finally:
        restore_env(saved)


def _check(args) -> int:
    try:
        _validate(args)
    except ValueError as e:
        return _fail(str(e), BAD_ARGS)
    _one_torch_thread()
    with _placement_env(args.placement):
        return _run_check(args)


def _run_check(args) -> int:
    import pytest

    from contracts.engines import EngineLoadError, chosen_engine, load_engine
    from contracts.plugin import Preloaded
    from contracts.validation import engine_placement

    spec = chosen_engine(args.engine)
    try:  # fail fast with one line; the session reuses this adapter instead of loading it again
        engine = load_engine(spec)
    except EngineLoadError as e:
        source = "" if args.engine or not os.environ.get("DSPARK_ENGINE") else " (the engine named by $DSPARK_ENGINE)"
        return _fail(f"{e}{source}", ENGINE_ERROR)
    try:
        engine_placement(engine, args.placement)
    except ValueError as e:
        return _fail(str(e), BAD_ARGS)
    with tempfile.TemporaryDirectory(prefix="dspark-contracts-") as tmp:
        json_path = args.json or os.path.join(tmp, "results.json")
        code = int(pytest.main(_pytest_args(args, spec, json_path), plugins=[Preloaded(engine)]))
        return _finish(args, engine, code, json_path)


def _finish(args, engine, code: int, json_path: str) -> int:
    """The exit code of a finished session, after writing the HTML page if asked."""
    if code == ENGINE_ERROR:  # an xdist worker could not load the engine; pytest printed why
        return ENGINE_ERROR
    if code not in (0, 1, 5):
        return _fail(f"pytest stopped with exit code {code}", FAILED)
    if not os.path.exists(json_path):
        return _fail(f"no contract ran (ids: {', '.join(args.contract) or 'all'})", NOTHING_RAN)
    with open(json_path) as f:
        data = json.load(f)
    if args.html:
        from contracts.html_report import write_html
        from contracts.step_sample import sample_steps

        data["step_sample"] = sample_steps(engine)
        try:
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(data, f, indent=2)
            write_html(args.html, [data])
        except OSError as e:  # a full disk
            return _write_failed(e, args.html)
    for path in (args.json, args.junitxml, args.html):
        if path:
            _out(f"dspark-contracts: wrote {path}")
    result, message = exit_code(data, args.require, args.allow_skips)
    if code == 1 and result == OK:  # pytest saw a failure the table does not hold
        result, message = FAILED, "pytest reported a failure outside the contract table"
    return _fail(message, result) if message else result


def _report(args) -> int:
    runs = []
    try:
        html = _output_path("--html", args.html)
        for path in args.runs:
            try:
                with open(path) as f:
                    runs.append(json.load(f))
            except ValueError as e:  # json.JSONDecodeError names no file
                raise ValueError(f"{path}: not a `check --json` file ({e})") from None
        from contracts.html_report import write_html

        try:
            write_html(html, runs)
        except OSError as e:  # the arguments were fine; the disk was not
            return _write_failed(e, html)
    except (OSError, ValueError) as e:
        return _fail(str(e), BAD_ARGS)
    _out(f"dspark-contracts: wrote {html} ({len(runs)} run(s))")
    return OK


def _list(args) -> int:
    from contracts.registry import all_contracts

    for c in all_contracts().values():
        _out(f"{c.id:<12} [{', '.join(sorted(c.requires))}] {c.statement}")
    return OK


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dspark-contracts", description=__doc__, epilog=EXIT_CODES,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    check = sub.add_parser("check", help="run the contracts against an engine and print the contract x result table",
                           epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("--engine", help="entry point name or module:factory (default: $DSPARK_ENGINE, else reference)")
    check.add_argument("--contract", action="append", default=[], metavar="ID",
                       help="only this contract (repeatable, any case)")
    check.add_argument("--require", action="append", default=[], metavar="LEVEL",
                       help="exit 3 unless every contract needing this capability ran (repeatable)")
    check.add_argument("--allow-skips", action="store_true", help="exit 0 even when every contract was skipped")
    check.add_argument("--device", metavar="cpu|cuda",
                       help="where the verify level runs (default: $DSPARK_DEVICE, else cpu); cuda needs a CUDA device")
    check.add_argument("--backend", metavar="torch|triton|auto",
                       help="verify ops: the torch reference or the Triton kernels (interpreted on cpu, compiled on "
                            "cuda); auto = triton on cuda, torch on cpu (default: $DSPARK_BACKEND, else auto)")
    check.add_argument("--profile", choices=("dev", "ci", "nightly"), help="Hypothesis profile (default: ci under CI, else dev)")
    check.add_argument("--hypothesis-seed", type=int, metavar="N", help="Hypothesis seed (dev and nightly profiles)")
    check.add_argument("-n", "--workers", metavar="N", help="run on N pytest-xdist workers ('auto' for one per core)")
    check.add_argument("--json", metavar="PATH", help="also write the table as JSON (engine, profile, failures)")
    check.add_argument("--html", metavar="PATH", help="also write a self-contained HTML conformance page")
    check.add_argument("--junitxml", metavar="PATH", help="also write JUnit XML (pytest's --junitxml)")
    check.add_argument("--durations", type=int, metavar="N", help="list the N slowest phases (pytest's --durations; 0 = all)")
    check.add_argument("--tb", choices=("short", "long", "auto", "line", "native", "no"), default="short",
                       help="traceback style of a failure, as pytest's --tb (default short: the table below it "
                            "already holds each violation's expected/observed and repro line)")
    check.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="one line per contract as it finishes (default: when stdout is a terminal)")
    check.set_defaults(func=_check)
    report = sub.add_parser("report", help="render `check --json` results (one column per run) as one HTML page",
                            epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    report.add_argument("runs", nargs="+", metavar="RUN.json")
    report.add_argument("--html", required=True, metavar="PATH")
    report.set_defaults(func=_report)
    sub.add_parser("list", help="list the contracts").set_defaults(func=_list)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        _out(flush=True)  # a write that fails (a full disk) fails here, not in the interpreter's exit
        return code
    except BrokenPipeError:  # `dspark-contracts list | head`: the reader left; say nothing more (Python's recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except _StdoutFailed as e:  # one line, not a traceback; what is left of stdout goes nowhere (the exit's
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # flush would fail again)
        return _fail(f"could not write to stdout: {e}", FAILED)


if __name__ == "__main__":
    sys.exit(main())
