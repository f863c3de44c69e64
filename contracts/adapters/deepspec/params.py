"""What DeepSpec's DSpark generation path accepts, by the neutral names of contracts.protocol.REQUEST_PARAMETERS.

DeepSpec has no serving API: a user sets eval.py's flags (upstream's eval.py at commit afdfa7c9; the snapshot under
../shared/engines/deepspec holds the deepspec/ package only), and the evaluator hands them, with the model's EOS ids,
to `generate_decoding_sample`, the entry point the step level calls. File:line are DeepSpec's at afdfa7c9:

- temperature: eval.py:35 `--temperature` (default 1.0), read by `Qwen3DSparkEvaluator._propose`
  (deepspec/eval/dspark/evaluator.py:130, the drafter's draws) and `generate_one_sample` (:173) ->
  `generate_decoding_sample` (deepspec/eval/base_evaluator.py:314, :356) -> `verify_draft_tokens` (:193, :229);
  the law is softmax(logits / T), greedy below 1e-5 (deepspec/utils/sampling.py:6-11, :20-27).
- max_new_tokens: eval.py:34 `--max-new-tokens` (default 2048) -> `generate_decoding_sample` (base_evaluator.py:312,
  :335).
- eos_id and stop_token_ids: one list, `generate_decoding_sample`'s `stop_token_ids` (base_evaluator.py:315). The
  evaluator fills it with every id of the target's `generation_config.eos_token_id`, else the tokenizer's
  `eos_token_id` (`resolve_stop_token_ids`, :82-97, called at :528); Qwen3's generation config lists two. Every id
  ends the request alike: inside the verify at the first accepted one (:264-276), after a round (:428-429), in the
  final trim (:58-72, :432). In the neutral names the first is the EOS id, the others stop token ids.
- seed: eval.py:44 `--seed` (default 980406): `seed_all(seed + sample index)` before each sample
  (base_evaluator.py:531). No contract exercises a seed parameter (REQUEST_PARAMETERS maps it to none); the step
  level seeds each request from the engine seed and its id (step.seeded-sampling, LOOP-005).

Not accepted, so not listed: top_k, top_p, min_p (the target and draft laws are softmax(logits / T) only, no cut),
frequency/presence/repetition penalties, min_new_tokens, logit_bias (no logits processing anywhere on the eval path),
ignore_eos (no switch: the evaluator always passes the model's EOS ids), stop_strings, n, logprobs, grammar,
custom_logit_processor. No flag of eval.py and no parameter of `generate_decoding_sample` or `verify_draft_tokens`
takes them. So no whole-request family (request.penalties, min-new-tokens, min-p, logit-bias) applies, DeepSpec keeps
no per-request parameter state (request.state) and applies none inside its verify (request.verify).
"""

ACCEPTED_PARAMETERS = ("temperature", "max_new_tokens", "eos_id", "stop_token_ids", "seed")
