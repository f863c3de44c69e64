"""The adapter for DeepSpec (deepseek-ai/DeepSpec), DeepSeek's own DSpark implementation, on CPU: one mixin per level.

It imports DeepSpec from its source tree (contracts.adapters.deepspec.env: ../shared/engines/deepspec from the
repository root, or $DSPARK_DEEPSPEC_PATH), builds weights-free models from seeds (models.py: transformers' Qwen3
target and DeepSpec's own `Qwen3DSparkModel` drafter from its `build_draft_config`), and calls the functions its
DSpark evaluator calls: `verify_draft_tokens` (verify level) and `generate_decoding_sample` with the evaluator's
`_init_context` / `_propose` (`forward_dspark_draft_block`, `build_dspark_proposal`) / `_update` (step level). Its
version is the tree's commit. DeepSpec runs in its own venv (transformers 5.10.2: scripts/install_deepspec.sh).

`DeepSpecAdapter(confidence_threshold=t)` runs the evaluator with its confidence head truncating proposals at t
(default 0, the evaluator's default: never); with t > 0 it declares step.self-truncating (a static step verifies the
cut, LOOP-003). `check` runs the default, and the threshold at 0.5 through the `options` capability (options.py):
DIST-002 runs its first configuration again with the truncation on (the paper's non-anticipation condition at a
non-zero threshold) and OPT-001 holds greedy outputs to those at 0. tests/deepspec also run the whole adapter at 0.5.

Declared: verify, verify.distributions, verify.chain-sampling (accept with min(1, p/q), else the residual
max(p - q, 0)), step, step.seeded-sampling (each request's generation is seeded by the engine seed and its id),
step.draft-draws (each round's sampled block, the proposal its confidence head kept and the proposal's draft_probs:
DIST-002 holds the drafter's multinomial draws to the law the verify scores them with, and the truncation to
non-anticipation), options (the evaluator's confidence_threshold, an output-preserving mode: options.py),
step.draft-context (the target features each round's `_update` hands the drafter, against a
float64 forward of the committed sequence: LOOP-008), draft.markov-block (`build_dspark_proposal` on logits the
contract chooses: DRAFT-004, markov_block.py).
Not declared, with the reason:
  - verify.injected-noise: DeepSpec draws its coins and residual from the global torch generator, not from inputs;
  - verify.float64: it computes its laws in float32 (`logits_to_probs` casts to float32);
  - verify.cap-trim: a verify length is the proposal's length (the confidence head's truncation), so DeepSpec
    never sees the drafts past it; verify.placeholders (the -1 padding is the adapter's); verify.empty-batch (the
    loop never verifies an empty batch);
  - step.pd-handoff, step.ragged, step.overlap-toggle: DeepSpec has no PD handoff, no verify budget planner and no
    overlap scheduler; its decode loop is batch size 1 only (`assert input_ids.size(0) == 1`), so the contracts
    about batches (joins and leaves mid-batch, row reuse, DP) have nothing to check: dp-metadata, dp-metadata.padding,
    ranks, ranks.tp-sync, handoff, kv (no paged KV: a DynamicCache per request), graph (no CUDA graphs), planner and
    relay.confidence (no confidence-scheduled budget: the evaluator truncates at a fixed threshold);
  - step.laws: drafts are multinomial draws (`sample_tokens`), so there is no Gumbel noise to report;
  - draft: its observation is paged-KV slots and a request-to-token row (SGLang's layout); DeepSpec's draft block
    writes a DynamicCache by position. The draft law and the truncation are checked through step.draft-draws
    (DIST-002); the drafter's context through step.draft-context (LOOP-008) and its length (LOOP-002);
  - request.penalties, .min-new-tokens, .min-p, .logit-bias, .state, .verify (REQ-002, 004, 005): DeepSpec takes
    temperature, max_new_tokens, its model's EOS ids as one stop list, and a run seed, nothing else (params.py, with
    file:line), so no per-request parameter state and nothing applied inside its verify. Its stop list is
    request.stop-tokens (REQ-001 greedy, REQ-003's stop-list configuration sampled); ignore_eos, which it has no
    switch for, is never drawn (not in accepted_parameters). The seed is not exercised (no contract reads a seed
    parameter).
`accepted_parameters` is params.ACCEPTED_PARAMETERS; the report lists those no contract exercises.
"""

from __future__ import annotations

from contracts import protocol
from contracts.adapters.deepspec import env as deepspec_env
from contracts.adapters.deepspec.ledger import KNOWN_FAILURES
from contracts.adapters.deepspec.markov_block import DeepSpecMarkovDraft
from contracts.adapters.deepspec.options import ENGINE_OPTIONS
from contracts.adapters.deepspec.params import ACCEPTED_PARAMETERS
from contracts.adapters.deepspec.step import DeepSpecStep
from contracts.adapters.deepspec.verify import DeepSpecVerify


class DeepSpecAdapter(DeepSpecVerify, DeepSpecMarkovDraft, DeepSpecStep):
    name = "deepspec"
    device = "cpu"
    tested_versions = (deepspec_env.DEEPSPEC_COMMIT,)
    known_failures = KNOWN_FAILURES
    accepted_parameters = ACCEPTED_PARAMETERS
    engine_options = ENGINE_OPTIONS
    # Contracts whose inputs DeepSpec's own producers never emit: run only with --hardening, never findings.
    hardening = {
        "VERIFY-011": "DeepSpec's evaluator samples softmax(logits/T) only: no producer sets a top-k or top-p, which "
                      "this contract's cases cut by (the temperature-only laws are checked by LOSSLESS-003..006)",
        "VERIFY-012": "DeepSpec's drafter samples ids from its LM head over the target's vocabulary: no producer emits "
                      "a draft id >= V",
    }
    # DeepSpec verifies one request per call (`verify_draft_tokens` reads row 0), so each verify-level Monte-Carlo
    # row costs a call: half of them outside `nightly` (contracts.budget; their power at the share is in
    # docs/engines/deepspec.md). Not DIST-001's generations: at half of them #31's re-inserted bug goes unseen.
    # Half the decode-loop machine's examples: it decodes one request at a time.
    draw_shares = {f"LOSSLESS-{i:03d}": 0.5 for i in range(3, 7)}
    example_shares = {f"LOOP-{i:03d}": 0.5 for i in range(1, 5)}
    # --coverage: DeepSpec's DSpark eval and modeling code the levels reach.
    coverage_modules = ("deepspec.eval.base_evaluator", "deepspec.eval.dspark.draft_ops",
                        "deepspec.eval.dspark.evaluator", "deepspec.modeling.dspark.markov_head",
                        "deepspec.modeling.dspark.qwen3.modeling", "deepspec.utils.sampling")
    capabilities = frozenset({protocol.VERIFY, protocol.VERIFY_DISTRIBUTIONS, protocol.VERIFY_CHAIN, protocol.STEP,
                              protocol.STEP_SEEDED_SAMPLING, protocol.STEP_DRAFT_DRAWS,
                              protocol.STEP_DRAFT_CONTEXT, protocol.DRAFT_MARKOV, protocol.REQUEST,
                              protocol.REQUEST_STOP_TOKENS, protocol.OPTIONS})

    def __init__(self, confidence_threshold: float = 0.0):
        if isinstance(confidence_threshold, bool) or not isinstance(confidence_threshold, (int, float)) \
                or not 0.0 <= confidence_threshold <= 1.0:
            raise ValueError(f"confidence_threshold: in [0, 1] (the evaluator's bound), got {confidence_threshold!r}")
        self.confidence_threshold = float(confidence_threshold)
        if self.confidence_threshold > 0:  # the confidence head cuts proposals: a static step verifies the cut
            self.capabilities = type(self).capabilities | {protocol.STEP_SELF_TRUNCATING}
        # Every load: one line naming what to set or run, never a fallback (exit 4 through the load-error path).
        self.version = deepspec_env.import_deepspec()
