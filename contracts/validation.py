"""Checks that run before any contract does: the adapter an engine returns, and `check`'s arguments.

Each raises ValueError or TypeError with one line naming the field or flag, so a
bad engine or a typo fails at once instead of as a skipped or crashed contract.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from typing import Iterable, NamedTuple, Optional

from contracts import budget
from contracts.protocol import CAPABILITIES, OPTIONS, REQUEST_PARAMETERS, exercised_parameters

_STR_FIELDS = ("name", "version", "device")
DEVICES = ("cpu", "cuda")
DEVICE_ENV, BACKEND_ENV = "DSPARK_DEVICE", "DSPARK_BACKEND"


def validate_adapter(engine) -> None:
    """The adapter's identity fields, its capability names, and each declared capability's methods."""
    for field in _STR_FIELDS + ("capabilities",):
        if not hasattr(engine, field):
            raise TypeError(f"it is not an adapter: it has no {field!r}")
    for field in _STR_FIELDS:
        value = getattr(engine, field)
        if not isinstance(value, str) or not value:
            raise TypeError(f"{field}: expected a non-empty str, got {value!r}")
    caps = engine.capabilities
    # A bare string would iterate as single letters and pass every membership test wrongly.
    if isinstance(caps, (str, bytes)) or not isinstance(caps, (set, frozenset, tuple, list)):
        raise TypeError(f"capabilities: expected a set of capability names, got {type(caps).__name__}")
    bad_types = [c for c in caps if not isinstance(c, str)]
    if bad_types:
        raise TypeError(f"capabilities: expected str names, got {bad_types!r}")
    backend = getattr(engine, "backend", None)  # optional: the verify backend, for engines that choose one
    if backend is not None and (not isinstance(backend, str) or not backend):
        raise TypeError(f"backend: expected a non-empty str or None, got {backend!r}")
    _check_version_policy(engine)
    from contracts.registry import all_contracts

    budget.check_shares(engine, all_contracts())
    unknown = sorted(set(caps) - set(CAPABILITIES))
    if unknown:
        hints = "".join(f"; for {u!r} did you mean {', '.join(close)}?" for u in unknown if (close := _close(u, CAPABILITIES)))
        raise ValueError(f"capabilities: unknown {', '.join(map(repr, unknown))}{hints} "
                         f"(known: {', '.join(sorted(CAPABILITIES))})")
    _check_parameters(engine, caps)
    _check_options(engine, caps)
    gaps = []
    for cap in sorted(caps):
        spec = CAPABILITIES[cap]
        missing = [m for m in spec.methods if not callable(getattr(engine, m, None))]
        missing += [a for a in spec.attributes if not hasattr(engine, a)]
        if missing:
            gaps.append(f"{cap!r} lacks {', '.join(missing)} (see {spec.protocol})")
        # The methods are the Protocol's; only presence is checked, their behaviour is what the contracts test.
    if gaps:
        raise TypeError("capabilities: declared but not implemented: " + "; ".join(gaps))


def _check_options(engine, caps) -> None:
    """`engine_options` is a tuple of EngineOption, names unique, kinds known; declaring `options` promises one the
    contracts can turn on."""
    from contracts.boundary.engine import OPTION_KINDS, EngineOption

    opts = getattr(engine, "engine_options", ())
    if not isinstance(opts, tuple) or not all(isinstance(o, EngineOption) for o in opts):
        raise TypeError(f"engine_options: expected a tuple of EngineOption, got {opts!r}")
    names = [o.name for o in opts]
    if len(set(names)) != len(names):
        raise ValueError(f"engine_options: names repeat: {sorted(n for n in set(names) if names.count(n) > 1)}")
    bad = [f"{o.name}: {o.kind!r}" for o in opts if o.kind not in OPTION_KINDS]
    if bad:
        raise ValueError(f"engine_options: unknown kind ({'; '.join(bad)}); known: {', '.join(OPTION_KINDS)}")
    if OPTIONS in caps and not any(not o.not_exercised for o in opts):
        raise ValueError("engine_options: the 'options' capability needs at least one option the contracts can turn on")


def _check_parameters(engine, caps) -> None:
    """`accepted_parameters` names known request parameters, and holds every one the declared capabilities exercise
    (a pack that exercises a parameter its engine does not accept is a pack bug, caught here, not a finding)."""
    accepted = getattr(engine, "accepted_parameters", ())
    if isinstance(accepted, (str, bytes)) or not isinstance(accepted, (tuple, list, frozenset, set)):
        raise TypeError(f"accepted_parameters: expected a tuple of parameter names, got {accepted!r}")
    unknown = sorted(set(accepted) - set(REQUEST_PARAMETERS))
    if unknown:
        raise ValueError(f"accepted_parameters: unknown {', '.join(map(repr, unknown))} "
                         f"(known: {', '.join(REQUEST_PARAMETERS)})")
    # The step level's sampling knobs belong to the machine, mapped as each engine allows (DeepSpec has no top_k);
    # of a request.* family the strategies draw only the parameters the engine accepts, so a declared family needs
    # at least one of them.
    exercised = {p for p in exercised_parameters(caps) if REQUEST_PARAMETERS[p] != "step"}
    empty = {REQUEST_PARAMETERS[p] for p in exercised} - {REQUEST_PARAMETERS[p] for p in exercised & set(accepted)}
    extra = sorted(p for p in exercised if REQUEST_PARAMETERS[p] in empty)
    if extra:
        raise ValueError(f"accepted_parameters: the capabilities exercise {', '.join(extra)}, which the engine does not "
                         f"accept (not in accepted_parameters)")


def _check_version_policy(engine) -> None:
    """The pack's declarations: `tested_versions` a tuple of version strings, `known_failures` its ledger entries
    (each already checked when built: version range, regexes, citation)."""
    from contracts.ledger import KnownFailure

    tested = getattr(engine, "tested_versions", ())
    if isinstance(tested, (str, bytes)) or not isinstance(tested, (tuple, list)) or \
            not all(isinstance(v, str) and v for v in tested):
        raise TypeError(f"tested_versions: expected a tuple of version strings, got {tested!r}")
    known = getattr(engine, "known_failures", ())
    if not isinstance(known, (tuple, list)) or not all(isinstance(e, KnownFailure) for e in known):
        raise TypeError(f"known_failures: expected a tuple of contracts.ledger.KnownFailure, got {type(known).__name__}")


def _close(value: str, known: Iterable[str]) -> list:
    return difflib.get_close_matches(value, list(known), n=3, cutoff=0.5)


def _suggest(value: str, known: Iterable[str]) -> str:
    close = _close(value, known)
    return f"; did you mean {', '.join(close)}?" if close else ""


def contract_ids(ids: Iterable[str], known: Iterable[str]) -> list:
    """`--contract` values, upper-cased, each one a registered id (duplicates dropped, order kept)."""
    known = list(known)
    out = []
    for raw in ids:
        cid = raw.strip().upper()
        if cid not in known:
            raise ValueError(f"--contract: unknown contract id {raw!r}{_suggest(cid, known)} "
                             f"(`dspark-contracts list` prints them all)")
        if cid not in out:
            out.append(cid)
    return out


def capability(level: str) -> str:
    """`--require LEVEL`: a known capability."""
    if level not in CAPABILITIES:
        raise ValueError(f"--require: unknown capability {level!r}{_suggest(level, CAPABILITIES)} "
                         f"(known: {', '.join(sorted(CAPABILITIES))})")
    return level


def workers(value: str) -> str:
    """`-n`: a positive int or 'auto', and pytest-xdist installed to honour it."""
    text = str(value).strip().lower()
    if text != "auto" and not (text.isdigit() and int(text) > 0):
        raise ValueError(f"-n/--workers: expected a positive integer or 'auto', got {value!r}")
    if importlib.util.find_spec("xdist") is None:
        raise ValueError("-n/--workers: needs pytest-xdist, which is not installed (pip install pytest-xdist)")
    return text


class Placement(NamedTuple):
    """Where the verify level runs: `device`, the `requested` backend and the one it resolves to (`backend`)."""

    device: str
    requested: str
    backend: str

    @property
    def interpreted(self) -> bool:
        """Triton kernels on the CPU run through Triton's interpreter (a fact of Triton's, for any engine using it)."""
        return self.backend == "triton" and self.device == "cpu"


def _choice(value, known, flag: str) -> str:
    text = str(value).strip().lower() if isinstance(value, str) else value
    if text not in known:
        raise ValueError(f"{flag}: expected one of {', '.join(known)}, got {value!r}")
    return text


class NoGpu(ValueError):
    """cuda was asked for on a machine without a usable CUDA device: the GPU tier cannot run here."""


def cuda_missing() -> Optional[str]:
    """Why this machine has no usable CUDA device, or None when it has one."""
    import torch

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) is built without CUDA"
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"


def placement(device=None, backend=None, *, pack=None, device_flag: str = "--device",
              backend_flag: str = "--backend") -> Placement:
    """`--device cpu|cuda` and `--backend NAME` (None: $DSPARK_DEVICE / $DSPARK_BACKEND, else cpu and auto), checked
    against this machine and the engine's pack, before the engine loads: CUDA present for cuda; the backend one the
    pack declares (`backends`; a pack without them runs its own kernels and takes only `auto`), resolved and checked
    by the pack's own `resolve_backend(device, requested, flag)` (its rules: a library installed, an interpreter
    mode). Raises ValueError naming the flag, or the environment variable the value came from."""
    if device is None and os.environ.get(DEVICE_ENV):
        device, device_flag = os.environ[DEVICE_ENV], DEVICE_ENV
    if backend is None and os.environ.get(BACKEND_ENV):
        backend, backend_flag = os.environ[BACKEND_ENV], BACKEND_ENV
    device = _choice("cpu" if device is None else device, DEVICES, device_flag)
    if device == "cuda":
        missing = cuda_missing()
        if missing:
            raise NoGpu(f"{device_flag}: 'cuda' requested, but {missing}: the GPU tier needs CUDA "
                        "(--allow-no-gpu skips it instead)")
    requested = "auto" if backend is None else backend
    if pack is None:  # the pack could not be imported: the engine's load reports that, and checks what it is handed
        text = str(requested).strip().lower()
        return Placement(device, text, text)
    backends = tuple(getattr(pack, "backends", ())) or ("auto",)
    if backends == ("auto",) and str(requested).strip().lower() != "auto":
        raise ValueError(f"{backend_flag} {requested}: engine {pack.name!r} runs its own verify kernels "
                         "(it does not take a backend)")
    requested = _choice(requested, backends, backend_flag)
    resolve = getattr(pack, "resolve_backend", None)
    return Placement(device, requested, resolve(device, requested, backend_flag) if resolve else requested)


def engine_placement(engine, wanted: Placement) -> None:
    """The loaded engine runs where `wanted` says: its device, and its backend unless `auto` left it to the engine.
    Raises ValueError naming --device or --backend; an engine without a `backend` runs its own kernels."""
    if engine.device != wanted.device:
        raise ValueError(f"--device {wanted.device}: engine {engine.name!r} runs on {engine.device} "
                         "(its adapter does not take a device)")
    have = getattr(engine, "backend", None)
    if wanted.requested != "auto" and have != wanted.backend:
        what = f"verifies with {have!r}" if have else "runs its own verify kernels (it does not take a backend)"
        raise ValueError(f"--backend {wanted.requested}: engine {engine.name!r} {what}")


def placement_env(where, *, pack=None, device: bool = True, backend: bool = True) -> dict:
    """The variables a placement hands to the adapter, xdist workers and rank processes: $DSPARK_DEVICE and
    $DSPARK_BACKEND (each when asked for), and whatever the pack's `placement_env(where)` adds (the reference pack:
    TRITON_INTERPRET=1 for interpreted kernels)."""
    wanted = {}
    if device:
        wanted[DEVICE_ENV] = where.device
    if backend:
        wanted[BACKEND_ENV] = where.requested
    extra = getattr(pack, "placement_env", None)
    if extra is not None:
        wanted.update(extra(where))
    return wanted


def set_env(wanted: dict) -> dict:
    """Set `wanted` in os.environ; returns what it replaced, for `restore_env`."""
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    return saved


def restore_env(saved: dict) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
