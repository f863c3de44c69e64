"""Known failures: the machinery a pack's known-failure entries run through.

Each engine pack lists its own entries (its adapter's `known_failures`); the core
holds none. An entry names the engine, the versions it applies to (a PEP 440
specifier such as ``==0.5.23`` or ``>=0.5.23,<0.5.25``), the contract and the
failing field (a regular expression searched in the violation's field, e.g.
``sampled: bonus``), and must cite an upstream issue or PR (``#NNNN``) or state
the evidence (``evidence: ...``). Only a violation of that field, on a version
the entry covers, is a known failure: any other failure of the same contract
fails the run, and a listed contract that starts passing fails the run too, so
the ledger can neither hide a new regression nor outlive the bug. Outside its
versions an entry stops applying and the contract fails or passes on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

_CITATION = re.compile(r"(#\d+|evidence: \S)")


def _specifier(versions: str) -> SpecifierSet:
    if not isinstance(versions, str) or not versions.strip():
        raise ValueError(f"versions: a known failure names the engine versions it applies to (e.g. '==0.5.23'), "
                         f"got {versions!r}")
    try:
        return SpecifierSet(versions)
    except InvalidSpecifier:
        raise ValueError(f"versions: not a version specifier such as '==0.5.23' or '>=0.5.23,<0.6': {versions!r}") from None


def version_in(version: str, versions: str) -> bool:
    """`version` lies in the specifier `versions` (pre-releases and source builds included). A version that is not
    PEP 440 (a commit id, say) matches only PEP 440's arbitrary equality naming it exactly (`===3f2a9c1`)."""
    spec = _specifier(versions)
    try:
        return spec.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return any(s.operator == "===" and s.version == version for s in spec)


@dataclass(frozen=True)
class Finding:
    """What a maintainer needs beside the evidence (absent for a hardening entry, which is no finding)."""

    status: str  # upstream: "known: <repo>#N (issue, open), #M (fix PR, open)", or "not found (searched: ...)"
    path: str  # the production path it is on (CUDA, ROCm/NPU/XPU, the CPU platform), with the engine's file:line
    severity: str  # one sentence: wrong outputs, memory corruption, wasted work, crash
    repro: str  # the standalone script under findings/<engine>/ (imports only the engine and torch)
    correction: Optional[Callable] = None  # correction(monkeypatch): the minimal in-process fix of the engine's code
    # The draft upstream report, where it is not the repro's `.md` (one report for findings that share a root cause).
    report: Optional[str] = None


@dataclass(frozen=True)
class KnownFailure:
    engine: str
    versions: str  # PEP 440 specifier of the engine versions the evidence holds for, e.g. "==0.5.23"
    contract_id: str
    field: str  # regex searched in ContractViolation.what
    reason: str
    observed: Optional[str] = None  # regex searched in ContractViolation.observed (e.g. the exception a call raised)
    finding: Optional[Finding] = None  # None for a hardening entry (the pack's `hardening` lists its contract)
    # The symptom depends on memory the engine leaves uninitialised, so the contract may pass on one machine and fail
    # on another: a pass does not retire the entry (the pack's findings test shows the bug with a fixed leftover).
    intermittent: bool = False

    def __post_init__(self):
        if not _CITATION.search(self.reason):
            raise ValueError(f"reason: a known failure must cite '#NNNN' or 'evidence: ...', got {self.reason!r}")
        _specifier(self.versions)
        for name in ("field", "observed"):
            pattern = getattr(self, name)
            if pattern is None and name == "observed":
                continue
            try:
                re.compile(pattern)
            except (re.error, TypeError) as e:
                raise ValueError(f"{name}: not a regular expression ({e}): {pattern!r}") from None

    def applies_to(self, engine: str, version: str, contract_id: str) -> bool:
        return self.engine == engine and self.contract_id == contract_id and version_in(version, self.versions)

    def matches(self, violation) -> bool:
        return (violation.contract_id == self.contract_id and re.search(self.field, violation.what) is not None
                and (self.observed is None or re.search(self.observed, str(violation.observed)) is not None))


def entries(known, engine: str, version: str, contract_id: str) -> tuple:
    """The entries of `known` that apply to this engine version and contract."""
    return tuple(e for e in known if e.applies_to(engine, version, contract_id))


def engine_entries(engine, contract_id: str) -> tuple:
    """The loaded engine's own entries (its pack's `known_failures`) that apply to its version and `contract_id`."""
    return entries(getattr(engine, "known_failures", ()), engine.name, engine.version, contract_id)


def corrections(engine) -> tuple:
    """The in-process corrections of every finding of the loaded engine's pack that applies to its version, once
    each: applied together, a contract whose failure is known must pass, or something else fails it."""
    out = []
    for e in getattr(engine, "known_failures", ()):
        fix = None if e.finding is None else e.finding.correction
        if fix is not None and fix not in out and version_in(engine.version, e.versions):
            out.append(fix)
    return tuple(out)


def match(known: tuple, violation) -> Optional[KnownFailure]:
    return next((e for e in known if e.matches(violation)), None)
