"""DeepSpec's options the contracts turn on: its evaluator's confidence threshold.

`Qwen3DSparkEvaluator` reads `args.confidence_threshold` (eval.py's flag upstream) at each proposal:
`build_dspark_proposal` keeps the drafts before the first whose confidence (sigmoid of the confidence head) falls
below it (`_confident_prefix_length`, deepspec/eval/dspark/draft_ops.py:82-93); 0, its default, keeps every draft;
`build_models` asserts it is in [0, 1] (evaluator.py:81). The DSpark paper documents the truncated loop as lossless
(Appendix A: the cut of draft k reads only what came before it), and its Figure 5 sweeps the threshold over (0, 1).
So it is an output-preserving mode: greedy outputs stay the same (OPT-001), but the cut moves the draws, so only the
law must hold with it on (DIST-002 runs its vanilla configuration again at 0.5, where the weights-free drafter's
confidence head cuts proposals of every length; tests/deepspec/test_confidence_threshold.py).
"""

from __future__ import annotations

from contracts.boundary.engine import EngineOption

THRESHOLD_OPTION = "confidence_threshold"
ENGINE_OPTIONS = (EngineOption(THRESHOLD_OPTION, "output-preserving", value="0.5", off="0", same_seed=False),)


def threshold_of(options, default: float) -> float:
    """The confidence threshold a spec's options set (the adapter's own where they set none); refuses what the
    evaluator would (its assert: 0 <= t <= 1) and any other name, naming EngineSpec.options."""
    threshold = default
    for name, value in options:
        if name != THRESHOLD_OPTION:
            raise ValueError(f"options: unknown engine option {name!r} (known: {THRESHOLD_OPTION})")
        try:
            threshold = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"options: {THRESHOLD_OPTION} is a number in [0, 1], got {value!r}") from None
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"options: {THRESHOLD_OPTION} in [0, 1] (the evaluator's assert), got {value!r}")
    return threshold
