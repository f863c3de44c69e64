"""Generate with the reference DSpark engine on the toy models and show what each step did.

    python -m dspark.demo [--drafter vanilla|gated|rnn|oracle|random] [--mode static|cap-accept|compact]
                          [--gamma 4] [--bs 4] [--max-new 24] [--temperature 0] [--budget-frac F] [--overlap]

Per step it prints the verify lengths L, the accept lengths (accepted drafts)
and tau, the tokens emitted per target forward (1 <= tau <= gamma+1). Long
runs (more than --quiet-above requests) show a tqdm progress bar instead.
A bad knob is refused with one line naming it (exit 2), before anything runs.
"""

from __future__ import annotations

import argparse
import math
import sys

from dspark.engine import VERIFY_MODES, DSparkConfig, DSparkEngine, Request, SamplingParams
from dspark.toy_models import DRAFTERS, ToyTarget, make_drafter, target_greedy_decode

SHOWN_REQUESTS = 4  # requests whose output is printed in full


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, like the knob checks below
        print(f"dspark.demo: {message}", file=sys.stderr)
        sys.exit(2)


def check_knobs(args) -> None:
    """Raise ValueError naming the first bad knob; the engine's own checks name config fields, not flags."""
    at_least = (("--gamma", args.gamma, 1, ""), ("--max-new", args.max_new, 1, ""),
                ("--bs", args.bs, 1, " (the demo needs at least one request to generate for)"),
                ("--vocab", args.vocab, 2, " (one token id is the drafter's mask token)"),
                ("--quiet-above", args.quiet_above, 0, ""))
    for flag, value, low, why in at_least:
        if value < low:
            raise ValueError(f"{flag}: must be >= {low}, got {value}{why}")
    if not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise ValueError(f"--temperature: must be a finite number >= 0 (0 = greedy), got {args.temperature}")
    if not 0 <= args.seed < 2 ** 63:  # the toy models seed torch generators, which take a signed 64-bit seed
        raise ValueError(f"--seed: must lie in [0, 2**63), got {args.seed}")
    frac = args.budget_frac
    if frac is not None and not (math.isfinite(frac) and 0 < frac <= 1):
        raise ValueError(f"--budget-frac: must lie in (0, 1], got {frac}")


def build(args) -> DSparkEngine:
    target = ToyTarget(args.vocab, seed=args.seed)
    cfg = DSparkConfig(gamma=args.gamma, verify_mode=args.mode, force_budget_frac=args.budget_frac,
                       enable_overlap=args.overlap, pool_size=args.bs, seed=args.seed,
                       max_context_len=args.max_new + 16 + 2 * (args.gamma + 1))
    return DSparkEngine(target, make_drafter(args.drafter, target, seed=args.seed + 1), cfg)


def main(argv=None) -> int:
    p = _Parser(prog="python -m dspark.demo", description=__doc__.splitlines()[0])
    p.add_argument("--drafter", choices=DRAFTERS, default="vanilla")
    p.add_argument("--mode", choices=VERIFY_MODES, default="compact")
    p.add_argument("--gamma", type=int, default=4)
    p.add_argument("--bs", type=int, default=4, help="requests, all in one batch")
    p.add_argument("--vocab", type=int, default=16)
    p.add_argument("--max-new", type=int, default=24)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--budget-frac", type=float, default=None, help="dspark_force_budget_frac in (0, 1]")
    p.add_argument("--overlap", action="store_true", help="overlap scheduling (inputs relayed through the FutureMap)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet-above", type=int, default=8, help="above this many requests, show a progress bar instead")
    args = p.parse_args(argv)
    try:
        check_knobs(args)
        engine = build(args)
    except ValueError as e:
        print(f"dspark.demo: {e}", file=sys.stderr)
        return 2
    params = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new)
    reqs = [Request(i, (i % args.vocab, (7 * i + 3) % args.vocab), params) for i in range(args.bs)]
    verbose = args.bs <= args.quiet_above
    print(f"DSpark reference engine: drafter={args.drafter} mode={args.mode} gamma={args.gamma} bs={args.bs} "
          f"T={args.temperature} budget_frac={args.budget_frac} overlap={args.overlap}")
    bar = None
    if not verbose:
        from tqdm import tqdm

        # An upper bound: requests may stop early, so the total is set to what was emitted at the end.
        bar = tqdm(total=args.bs * args.max_new, unit="tok", desc="generating")

    def show(rec):
        if bar is not None:
            bar.update(sum(len(e) for e in rec.emitted))
            return
        budget = "-" if rec.budget is None else rec.budget
        print(f"step {rec.step:3d}  bs={len(rec.rids)}  budget={budget:>3}  verify_lens={rec.verify_lens}  "
              f"accept_lens={rec.correct_lens}  tau={rec.tokens_per_forward:.2f}")

    out = engine.generate(reqs, progress=show)
    if bar is not None:  # the prefill's first tokens reach no step record; count every emitted token here
        emitted = sum(len(tokens) for tokens in out.values())
        bar.total = emitted
        bar.update(emitted - bar.n)
        bar.close()
    steps = engine.records
    forwards = sum(len(r.rids) for r in steps)
    committed = sum(sum(r.commit_lens) for r in steps)
    if forwards:
        print(f"{len(steps)} steps, mean tau = {committed / forwards:.3f} tokens per target forward "
              f"(gamma+1 = {args.gamma + 1})")
    else:  # a tau of 0 would read as a broken drafter
        print("0 steps: every request ended at its prefill, so no verify ran (tau undefined)")
    if args.temperature == 0:
        same = all(out[r.rid] == target_greedy_decode(engine.target, r.prompt, args.max_new) for r in reqs)
        print(f"greedy output == plain greedy decoding of the target: {same}")
    for r in reqs[:SHOWN_REQUESTS]:
        print(f"request {r.rid}: prompt {list(r.prompt)} -> {out[r.rid]}")
    if len(reqs) > SHOWN_REQUESTS:
        print(f"... and {len(reqs) - SHOWN_REQUESTS} more requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
