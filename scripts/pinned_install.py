"""The pinned, --no-deps install both engine install scripts (install_sglang.sh, install_vllm.sh) run, in the
interpreter being installed into:

  preflight: CPython 3.11, exactly the CPU torch, the packages torch brings, and what must (not) be there already.
  install:   the pins, then the engine wheel, each `pip install --no-deps` (nothing can pull a CUDA torch); then
             torch untouched, every pin and the wheel at its exact version, nothing CUDA or forbidden, and no
             `pip check` problem that was not there before, apart from the engine's own skipped requirements.

Exit 1 with one line per problem (prefixed with the calling script's name), 0 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import subprocess
import sys


def _version(name: str):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def _named(pairs):
    """NAME=MESSAGE arguments -> (name, message)."""
    return [tuple(p.split("=", 1)) for p in pairs]


def preflight(args) -> list:
    if sys.version_info[:2] != (3, 11):
        return [f"need CPython 3.11 (the pins are cp311 wheels), got {sys.version.split()[0]}"]
    have = _version("torch")
    if have is None:
        return [f"torch is not installed; install torch=={args.torch} (CPU wheel) first"]
    if have != args.torch:
        return [f"torch is {have}, need exactly {args.torch} ({args.torch_reason}); this script never touches torch"]
    missing = [n for n in args.from_torch if _version(n) is None]
    if missing:
        return [f"packages normally brought by torch are missing: {missing}"]
    for name, message in _named(args.warn_if_installed):
        if _version(name) is not None:
            print(f"[{args.log}] WARNING: {name} is installed; {message}", file=sys.stderr)
    return [f"{name} is installed in this interpreter; {message}" for name, message in _named(args.refuse_if_installed)
            if _version(name) is not None]


def _pip_check() -> list:
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    return (done.stdout + done.stderr).splitlines()


PIP_INSTALL = [sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               "--no-input", "--progress-bar", "off"]


def install(args) -> list:
    before = _pip_check()
    for what, names in ((f"{len(args.pins)} pinned dependencies", args.pins), (f"{args.dist}=={args.version}",
                                                                             [f"{args.dist}=={args.version}"])):
        print(f"[{args.log}] installing {what} (--no-deps)", flush=True)
        if subprocess.run(PIP_INSTALL + names).returncode != 0:
            return [f"pip install of {what} failed (see above)"]
    return inspect(args, before, _pip_check())


def inspect(args, before: list, after: list) -> list:
    errors = []
    if _version("torch") != args.torch:
        errors.append(f"torch is now {_version('torch')}, expected {args.torch}")
    if _version(args.dist) != args.version:
        errors.append(f"{args.dist} is {_version(args.dist)}, expected {args.version}")
    for pin in args.pins:
        name, _, want = pin.partition("==")
        if _version(name) != want:
            errors.append(f"{name}: installed {_version(name)}, pinned {want}")
    forbidden = re.compile(args.forbidden)
    for dist in md.distributions():
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        if forbidden.match(name):
            errors.append(f"forbidden package present: {name}=={dist.version}")
    before = set(before)
    own = [line for line in after if line.startswith(f"{args.dist} ")]
    new = [line for line in after if line not in before and line.strip() and line not in own
           and not line.startswith("No broken requirements")]
    errors += [f"new pip check problem: {line}" for line in new]
    print(f"[{args.log}] pip check: {len(own)} expected lines for {args.dist}'s skipped requirements "
          f"({args.skipped_note}), {len(new)} new problems")
    if not errors:
        print(f"[{args.log}] torch {_version('torch')}, {args.dist} {_version(args.dist)}, {len(args.pins)} pins exact, "
              "no CUDA packages")
    return errors


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True, help="the calling script's name, for the messages")
    parser.add_argument("--torch", required=True, help="the exact torch version (2.13.0+cpu)")
    sub = parser.add_subparsers(dest="command", required=True)
    pre = sub.add_parser("preflight")
    pre.add_argument("--torch-reason", default="the pins are built against it")
    pre.add_argument("--from-torch", nargs="*", default=[])
    pre.add_argument("--warn-if-installed", nargs="*", default=[], metavar="NAME=MESSAGE")
    pre.add_argument("--refuse-if-installed", nargs="*", default=[], metavar="NAME=MESSAGE")
    post = sub.add_parser("install")
    post.add_argument("--dist", required=True)
    post.add_argument("--version", required=True)
    post.add_argument("--forbidden", required=True, help="regex of package names that must be absent")
    post.add_argument("--skipped-note", default="")
    post.add_argument("--pins", nargs="*", default=[])
    args = parser.parse_args(argv)
    errors = preflight(args) if args.command == "preflight" else install(args)
    for e in errors:
        print(f"[{args.log}] ERROR: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
