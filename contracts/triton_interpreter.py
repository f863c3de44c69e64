"""Triton's interpreter without the work compiled kernels never do.

Triton's integer-overflow sanitiser wraps every integer add, sub and mul in int64 casts and range compares and
hands the result to `device_assert`, which drops it unless the kernel runs with `debug` on. Compiled kernels
eliminate the dead checks; the interpreter evaluates them in numpy first: a third to a half of an interpreted
kernel's time (SGLang's chain-sampling kernel, 2026-12-03). With `debug` off nothing reads them, so turning the
option off changes no result, only the time. With `debug` on the option is left alone: the asserts then fire.
"""

from __future__ import annotations

import dataclasses
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
