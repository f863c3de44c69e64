"""DeepSpec's known failures (commit afdfa7c9's eval path): each a finding on DeepSpec's own code with its evidence
and the correction that makes its contracts pass (tests/deepspec/test_findings.py)."""

from contracts.adapters.deepspec import corrections
from contracts.ledger import Finding, KnownFailure

_COMMIT = "===afdfa7c9382a3341a3e6f17756dd816da79f132c"  # the tree's commit is its version (PEP 440 arbitrary equality)

_ROUND_PAST_MAX = (
    "evidence: deepspec/eval/base_evaluator.py generate_decoding_sample keeps `start` at the pending anchor "
    "output_ids[start], already an emitted token, and loops `while start < max_length` (max_length = prompt + "
    "max_new_tokens): a request whose round ends with exactly max_new_tokens tokens out (start == max_length - 1; "
    "always for max_new_tokens 1) gets one more propose + verify round whose tokens the final trim drops, and that "
    "round is counted in acceptance_lengths / proposal_lengths / verify_count. Shrunk: the pinned program's greedy "
    "request 6 (prompt [1], max_new_tokens 10) ends on a step that emits nothing. Looping while start + 1 < "
    "max_length makes LOOP-002 and LOOP-004 pass (tests/deepspec/test_findings.py)"
)

_ROUND_FINDING = Finding(
    status="not found (searched deepseek-ai/DeepSpec issues and PRs: max_new_tokens, extra verify, acceptance length, "
           "generate_decoding_sample; 2026-12)",
    path="every platform, DeepSpec's evaluator (Qwen3DSparkEvaluator / Gemma4DSparkEvaluator.generate_one_sample -> "
         "generate_decoding_sample): deepspec/eval/base_evaluator.py:385 (`while start < max_length:`)",
    severity="wasted compute: one extra draft + target forward per sample that ends on max_new_tokens exactly, all "
             "its tokens trimmed; outputs unchanged (the round is counted in accept_len and verify_rate, but as an "
             "unbiased extra sample, so those averages are not skewed)",
    repro="findings/deepspec/loop_004_round_after_max_new_tokens.py", correction=corrections.correct_loop_bound)

KNOWN_FAILURES: tuple = (
    KnownFailure("deepspec", _COMMIT, "LOOP-002", r"^request \d+ emitted at finish$", _ROUND_PAST_MAX,
                 observed=r"^0\b", finding=_ROUND_FINDING),
    KnownFailure("deepspec", _COMMIT, "LOOP-004", r"^request \d+ tokens emitted this step$", _ROUND_PAST_MAX,
                 observed=r"^\[\]", finding=_ROUND_FINDING),
    # Hardening (the pack's `hardening`): what DeepSpec does with inputs its producers never emit.
    KnownFailure("deepspec", _COMMIT, "VERIFY-011", r"^target law of row \d+ \(T=[^,]+, top_k=([1-9]\d*, top_p=[^)]+|\d+, "
                 r"top_p=0\.\d+)\)$",
                 "evidence: verify_draft_tokens builds its target law with logits_to_probs(logits, T) = softmax(logits/T): "
                 "DeepSpec has no top-k or top-p, so a row with a cut reads the uncut law"),
    KnownFailure("deepspec", _COMMIT, "VERIFY-012", r"^call$",
                 "evidence: verify_draft_tokens gathers p and q at the draft id without a range check "
                 "(deepspec/utils/sampling.py gather_token_probs): an id >= V raises; shrunk: V 2, a one-hot draft of id 2",
                 observed=r"^RuntimeError: index \d+ is out of bounds"),
)
