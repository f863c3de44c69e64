"""Triton's interpreter without work that changes no result.

Two kinds, both switched off here for the interpreter already imported in the process:

- Triton's integer-overflow sanitiser wraps every integer add, sub and mul in int64 casts and range compares and
  hands the result to `device_assert`, which drops it unless the kernel runs with `debug` on. Compiled kernels
  eliminate the dead checks; the interpreter evaluates them in numpy first: a third to a half of an interpreted
  kernel's time (SGLang's chain-sampling kernel, 2026-12-03). With `debug` off nothing reads them, so turning the
  option off changes no result, only the time. With `debug` on the option is left alone: the asserts then fire.
- Repeated language patching. A launch replaces `triton.language`'s builtins with interpreted ones for its run and
  restores them after; every call of a nested `@triton.jit` function inside it scans those modules again
  (`inspect.getmembers`, about 0.2 ms) to patch what is already patched. SGLang's chain kernel makes about 59,000
  such calls in DIST-001. A nested call now skips the scan when every language module it sees was patched by the
  launch it runs in (never between launches: Triton leaks a nested call's patches of modules the launch did not
  patch, so "looks patched" is not the test).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys


def skip_dead_overflow_checks() -> bool:
    """Turn off the overflow sanitiser of the interpreter already imported in this process when its asserts
    would be dropped anyway (`debug` off). True when it was turned off here; a no-op without the interpreter."""
    interpreter = sys.modules.get("triton.runtime.interpreter")
    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if options is None or getattr(options, "debug", True) or not getattr(options, "sanitize_overflow", False):
        return False
    builder.options = dataclasses.replace(options, sanitize_overflow=False)
    return True


def skip_repeated_language_patches() -> bool:
    """Inside a running launch, make the language patching of a nested `@triton.jit` call a no-op when every
    language module it sees was patched by that launch. True when installed here; a no-op without the interpreter
    or on a Triton whose interpreter is laid out otherwise."""
    interpreter = sys.modules.get("triton.runtime.interpreter")
    patch = getattr(interpreter, "_patch_lang", None)
    if patch is None or hasattr(patch, "__wrapped__") or not hasattr(interpreter, "_LangPatchScope"):
        return False
    languages = (interpreter.tl, interpreter.tl.core)
    patched = set()  # ids of the modules patched since the running launch began; empty between launches

    class _LaunchScope:  # the launch's own scope: restoring it ends the launch
        def __init__(self, scope):
            self.scope = scope

        def restore(self):
            self.scope.restore()
            patched.clear()

    @functools.lru_cache(maxsize=None)  # a jit function's module-level imports stay put
    def _languages_seen(fn) -> frozenset:
        return frozenset(id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in languages)

    @functools.wraps(patch)
    def _patch_lang(fn):
        seen = _languages_seen(fn)
        if not patched:  # a launch begins (nested calls only happen inside one)
            patched.update(seen)
            return _LaunchScope(patch(fn))
        if seen <= patched:
            return interpreter._LangPatchScope()
        patched.update(seen)  # Triton never restores a nested call's patches: they last the launch
        return patch(fn)

    interpreter._patch_lang = _patch_lang
    return True


def skip_dead_work() -> None:
    """Both of the above, for a pack that has just imported the kernels it will launch interpreted."""
    skip_dead_overflow_checks()
    skip_repeated_language_patches()
