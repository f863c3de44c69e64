"""Make the real sglang 0.5.23 wheel importable and callable on a CPU-only box.

Nothing here imports sglang at module import time. Call ``prepare_sglang_import()``
once before the first ``import sglang...``; it is idempotent.

What it does (see shared/reference/sglang_dspark.md, section 4):

1. checks that sglang is installed at exactly 0.5.23 (``bash scripts/install_sglang.sh``
   otherwise);
2. imports ``transformers.utils.import_utils`` and primes its cached
   ``is_torchvision_available()`` to False, *then* puts a torchvision stand-in at
   the front of ``sys.meta_path``. sglang's ``srt/configs`` import torchvision
   unconditionally (``srt/multimodal/internvl_utils.py``); the only torchvision
   wheels on reach are CUDA-linked and break every import. The order matters:
   a transformers that sees the stand-in first believes torchvision is
   installed and later fails with ``InvalidVersion: 'N/A'``;
3. publishes the two config namespaces the DSpark host paths read:
   ``sglang.srt.runtime_context.get_context()._config_bags["spec"]`` (read by
   ``FutureMap.stash`` -> ``spec_need_hidden_states()`` -> ``get_spec()``) and
   ``["exec"]`` (read by ``spec_utils.spec_prepare_for_decode`` -> ``get_exec()``).

Two more globals need patching for some calls; they are offered as context
managers and never applied globally:

* ``num_token_non_padded(enabled)`` patches
  ``sglang.srt.speculative.dspark_components.dspark_draft.enable_num_token_non_padded``
  (the real one reads the parallel context / MoE A2A backend);
* ``checkpoint_kv_cache_noop(active=True)`` patches
  ``sglang.srt.disaggregation.decode_schedule_batch_mixin.checkpoint_kv_cache``
  (the real one needs a radix tree).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
import types
from types import SimpleNamespace
from typing import Any, Iterator, Optional

from contracts.patching import patched
from contracts.triton_interpreter import skip_dead_work

__all__ = [
    "SGLANG_VERSION",
    "INSTALL_HINT",
    "sglang_unavailable_reason",
    "check_sglang_installed",
    "prepare_sglang_import",
    "install_torchvision_stand_in",
    "torchvision_stand_in_installed",
    "inject_runtime_config",
    "default_spec_config",
    "default_exec_config",
    "num_token_non_padded",
    "checkpoint_kv_cache_noop",
]

SGLANG_VERSION = "0.5.23"  # what scripts/install_sglang.sh installs, and the version the pack was tested with
INSTALL_HINT = "bash scripts/install_sglang.sh"

RUNTIME_CONTEXT_MODULE = "sglang.srt.runtime_context"
DSPARK_DRAFT_MODULE = "sglang.srt.speculative.dspark_components.dspark_draft"
DECODE_MIXIN_MODULE = "sglang.srt.disaggregation.decode_schedule_batch_mixin"

_PREPARED = False


# --------------------------------------------------------------------------------------
# (a) installed-version check (no sglang import)
# --------------------------------------------------------------------------------------
def sglang_unavailable_reason() -> Optional[str]:
    """None when sglang is installed and importable, else a one-line reason. Any version loads: the pack's version
    policy (`tested_versions`) says whether it was tested, and `--strict-version` refuses one that was not.

    Cheap: reads package metadata and the import spec; does not import sglang.
    Suitable for ``pytest.mark.skipif``.
    """
    try:
        installed = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return f"sglang is not installed; run `{INSTALL_HINT}`"
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError) as exc:  # pragma: no cover - broken sys.path entries
        spec, err = None, exc
    else:
        err = None
    if spec is None:
        return f"sglang {installed} metadata found but the package is not importable ({err}); run `{INSTALL_HINT}`"
    return None


def check_sglang_installed() -> None:
    """Raise RuntimeError with the install instruction unless sglang is importable."""
    reason = sglang_unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)


# --------------------------------------------------------------------------------------
# (b) torchvision stand-in
# --------------------------------------------------------------------------------------
class _Placeholder:
    """Anything looked up on a stand-in module: callable, subclassable, iterable (empty)."""

    __slots__ = ("_name",)

    def __init__(self, name: str = "torchvision.?", *args: Any, **kwargs: Any) -> None:
        object.__setattr__(self, "_name", name)

    def __call__(self, *args: Any, **kwargs: Any) -> "_Placeholder":
        return _Placeholder(f"{self._name}()")

    def __getattr__(self, name: str) -> "_Placeholder":
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self._name}.{name}")

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __mro_entries__(self, bases: tuple) -> tuple:
        # `class Foo(torchvision.SomeBase): ...` at import time -> plain object base.
        return (object,)

    def __repr__(self) -> str:
        return f"<torchvision stand-in {self._name}>"


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self.__name__}.{name}")


class _TorchvisionStandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``torchvision`` and every ``torchvision.*`` submodule as a stand-in package."""

    sglang_env_torchvision_stand_in = True  # marker, survives a reload of this module
    ROOT = "torchvision"

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if fullname == self.ROOT or fullname.startswith(self.ROOT + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []  # a package, so submodule imports come back here
        module.__sglang_env_stand_in__ = True
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def torchvision_stand_in_installed() -> bool:
    return any(getattr(f, "sglang_env_torchvision_stand_in", False) for f in sys.meta_path)


def _real_torchvision_installed() -> bool:
    try:
        importlib.metadata.version("torchvision")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def install_torchvision_stand_in() -> None:
    """Import transformers' availability table first, then add the finder (idempotent).

    If a real torchvision distribution is installed the stand-in is not used; the
    real one is imported once so that a CUDA-linked build fails here with a clear
    message rather than deep inside sglang.
    """
    if torchvision_stand_in_installed():
        return
    # Order matters: transformers must decide "torchvision absent" before the finder exists.
    iu = importlib.import_module("transformers.utils.import_utils")
    if _real_torchvision_installed():
        try:
            importlib.import_module("torchvision")
        except Exception as exc:  # noqa: BLE001 - report any failure mode of a broken build
            raise RuntimeError(
                f"a real torchvision is installed but does not import with this torch ({type(exc).__name__}: {exc}); "
                f"uninstall it (`python -m pip uninstall -y torchvision`); {INSTALL_HINT} never installs it"
            ) from exc
        return
    # In transformers 5.x these are lru_cached and lazy: merely importing import_utils
    # records nothing, so call them now, while torchvision is really absent.
    for fn_name in ("is_torchvision_available", "is_torchvision_v2_available"):
        fn = getattr(iu, fn_name, None)
        if fn is not None and fn():
            raise RuntimeError(
                f"transformers.{fn_name}() is True although no torchvision is installed; something already shadows torchvision"
            )
    if "torchvision" in sys.modules and not getattr(sys.modules["torchvision"], "__sglang_env_stand_in__", False):
        raise RuntimeError("a torchvision module is already imported; call prepare_sglang_import() earlier")
    sys.meta_path.insert(0, _TorchvisionStandInFinder())


# --------------------------------------------------------------------------------------
# (c) runtime config
# --------------------------------------------------------------------------------------
def default_spec_config(**overrides: Any) -> SimpleNamespace:
    """The ``spec`` namespace: only what FutureMap.stash / spec_need_hidden_states() read."""
    fields = dict(speculative_algorithm="DSPARK", enable_multi_layer_eagle=False)
    fields.update(overrides)
    return SimpleNamespace(**fields)


def default_exec_config(**overrides: Any) -> SimpleNamespace:
    """The ``exec`` namespace: only what spec_prepare_for_decode reads (exec.mamba...)."""
    fields: dict[str, Any] = dict(mamba=SimpleNamespace(enable_mamba_extra_buffer_lazy=False))
    fields.update(overrides)
    return SimpleNamespace(**fields)


def inject_runtime_config(spec: Any = None, exec_: Any = None, *, replace: bool = False) -> None:
    """Publish minimal ``spec`` / ``exec`` bags on sglang's process-wide RuntimeContext.

    Keeps a namespace that is already published unless ``replace`` is True, so a test
    that published its own config (e.g. via ``get_context().override_server_args``) wins.
    """
    rc = importlib.import_module(RUNTIME_CONTEXT_MODULE)
    ctx = rc.get_context()
    bags = dict(ctx._config_bags or {})
    for name, value in (
        ("spec", spec if spec is not None else default_spec_config()),
        ("exec", exec_ if exec_ is not None else default_exec_config()),
    ):
        if replace or name not in bags:
            bags[name] = value
    ctx._config_bags = bags


# --------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------
def prepare_sglang_import() -> None:
    """Check the install, add the torchvision stand-in, publish the runtime config.

    Raises RuntimeError (with the one-line install instruction) when sglang is missing, or when the sglang that
    imports is not the one installed (another copy earlier on sys.path). Safe to call many times.
    """
    global _PREPARED
    check_sglang_installed()
    if _PREPARED:
        return
    import os

    import torch

    if not torch.cuda.is_available() and "triton" not in sys.modules:
        # SGLang's Triton kernels (the chain sampler, the KV-slot assignment) then run through the
        # interpreter on CPU tensors. Triton fixes this per kernel when it is decorated, i.e. at import.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    install_torchvision_stand_in()
    inject_runtime_config()
    import sglang  # noqa: PLC0415 - after the stand-in on purpose

    installed = importlib.metadata.version("sglang")
    if getattr(sglang, "__version__", installed) != installed:
        raise RuntimeError(
            f"imported sglang reports {sglang.__version__} (from {getattr(sglang, '__file__', '?')}), "
            f"but sglang {installed} is installed; another copy shadows it on sys.path"
        )
    skip_dead_work()
    _PREPARED = True


def scratch_dir(prefix: str) -> str:
    """A temporary directory (configs, tables SGLang reads from disk) removed when the creating process exits.

    Only the creator removes it: forked rank processes inherit the path and exit before the parent is done with it.
    """
    import atexit
    import os
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix=prefix)
    owner = os.getpid()
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(path, ignore_errors=True))
    return path


# --------------------------------------------------------------------------------------
# scoped monkeypatches (never applied globally)
# --------------------------------------------------------------------------------------


@contextlib.contextmanager
def num_token_non_padded(enabled: bool) -> Iterator[None]:
    """Within the block, ``dspark_draft.enable_num_token_non_padded()`` returns ``enabled``.

    It is read by ``DraftBlockProposer.__init__`` (allocates the persistent ``[1]`` int32
    ``_num_token_non_padded`` buffer) and by ``_make_num_token_non_padded`` inside
    ``_fill_dp_moe_sync_metadata`` (the 0-d ``global_num_token_non_padded``). A proposer built
    with ``__new__`` must set ``_num_token_non_padded`` itself, consistently with ``enabled``.
    """
    flag = bool(enabled)
    with patched(DSPARK_DRAFT_MODULE, "enable_num_token_non_padded", lambda: flag):
        yield


@contextlib.contextmanager
def checkpoint_kv_cache_noop(active: bool = True) -> Iterator[None]:
    """Within the block (when ``active``), ``checkpoint_kv_cache(req, tree_cache)`` in
    ``decode_schedule_batch_mixin`` does nothing, so ``process_prebuilt`` runs without a radix
    tree. ``active=False`` leaves the real function in place."""
    if not active:
        yield
        return
    with patched(DECODE_MIXIN_MODULE, "checkpoint_kv_cache", lambda req, tree_cache: None):
        yield
