"""Minimal in-process corrections of DeepSpec's findings (ledger.py), each `correction(monkeypatch)`: applied, the
finding's contracts pass (tests/deepspec/test_findings.py)."""

from __future__ import annotations

import inspect

_LOOP_BOUND = "    while start < max_length:\n"
_LOOP_BOUND_FIXED = "    while start + 1 < max_length:\n"


def correct_loop_bound(mp) -> None:
    """generate_decoding_sample stops once the output holds max_new_tokens tokens: `output_ids[start]` is already
    an emitted token (the pending anchor), so the loop runs while start + 1 < max_length. One line of DeepSpec's own
    source changed, recompiled in its module's namespace."""
    from deepspec.eval import base_evaluator as be

    source = inspect.getsource(be.generate_decoding_sample)
    if source.count(_LOOP_BOUND) != 1:
        raise RuntimeError("generate_decoding_sample no longer has the loop bound this correction fixes")
    namespace: dict = {}
    exec(compile(source.replace(_LOOP_BOUND, _LOOP_BOUND_FIXED), be.__file__, "exec"), be.__dict__, namespace)
    mp.setattr(be, "generate_decoding_sample", namespace["generate_decoding_sample"])
