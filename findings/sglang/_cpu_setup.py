"""Minimal preparation to import and call SGLang 0.5.23's scheduler-side code on a CPU-only box.

Shared by the scripts in this folder. Imports only the standard library, torch and sglang.

1. Version gate: a script states the version it was written for; any other version exits 2 with one line.
2. torchvision stand-in: sglang.srt.configs imports torchvision unconditionally (srt/multimodal/internvl_utils.py)
   and the torchvision wheels on reach are CUDA-linked. transformers must record "torchvision absent" BEFORE the
   stand-in exists, otherwise it later fails with InvalidVersion('N/A').
3. TRITON_INTERPRET=1 without a GPU, so SGLang's Triton kernels (e.g. the request-to-token assign kernel) run through
   Triton's interpreter on CPU tensors, i.e. the same kernel code the GPU runs.
4. publish(**server_args): SGLang's own dummy ServerArgs publication (RuntimeContext.override_server_args), which fills
   the config bags (spec, schedule, exec, ...) that the scheduler-side functions read through get_spec()/get_schedule().
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import os
import sys
import types
import warnings

AFFECTED = "0.5.23"


def require_version(finding: str, affected: str = AFFECTED) -> None:
    """Exit 2 with one line when the installed sglang is not the affected version."""
    try:
        installed = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        print(f"{finding}: sglang is not installed; this repro applies to sglang=={affected}")
        sys.exit(2)
    if installed != affected:
        print(f"{finding}: sglang {installed} installed; this repro applies to sglang=={affected} only")
        sys.exit(2)


class _Anything:
    """Whatever is looked up on the stand-in: callable, subclassable, empty when iterated."""

    def __call__(self, *a, **k):
        return _Anything()

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __iter__(self):
        return iter(())

    def __mro_entries__(self, bases):
        return (object,)


class _StandIn(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Anything()


class _TorchvisionFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandIn(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        return None


_DONE = False


def prepare() -> None:
    """Steps 2 and 3 (idempotent); call before the first sglang import."""
    global _DONE
    if _DONE:
        return
    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")  # read by Triton when a kernel is decorated, i.e. at import
    try:
        importlib.metadata.version("torchvision")
    except importlib.metadata.PackageNotFoundError:
        iu = importlib.import_module("transformers.utils.import_utils")
        for name in ("is_torchvision_available", "is_torchvision_v2_available"):  # lru_cached: record "absent" now
            fn = getattr(iu, name, None)
            if fn is not None:
                fn()
        sys.meta_path.insert(0, _TorchvisionFinder())
    _DONE = True


def publish(**server_args):
    """Publish a dummy ServerArgs with these fields through SGLang's own RuntimeContext (device cpu)."""
    prepare()
    from sglang.srt.runtime_context import get_context

    server_args.setdefault("device", "cpu")
    return get_context().override_server_args(**server_args).install()
