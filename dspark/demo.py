"""Generate with the reference DSpark engine on the toy models and show what each step did.

    python -m dspark.demo [--drafter vanilla|gated|rnn|oracle|random] [--mode static|cap-accept|compact]
                          [--gamma 4] [--bs 4] [--max-new 24] [--temperature 0] [--budget-frac F] [--overlap]

Per step it prints the verify lengths L, the accept lengths (accepted drafts)
and tau, the tokens emitted per target forward (1 <= tau <= gamma+1). Long
runs (more than --quiet-above requests) show a tqdm progress bar instead.
Every knob has bounds (see --help); a value outside them is refused with one line naming it (exit 2), before
anything runs or is allocated.
"""

from __future__ import annotations

import argparse
import math
import sys

from dspark.engine import VERIFY_MODES, DSparkConfig, DSparkEngine, Request, SamplingParams
from dspark.toy_models import DRAFTERS, MAX_BLOCK, ToyTarget, make_drafter, target_greedy_decode

SHOWN_REQUESTS = 4  # requests whose output is printed in full


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, like the knob checks below
        print(f"dspark.demo: {message}", file=sys.stderr)
        sys.exit(2)


# Every integer knob: (low, high, why the bound). The toy models are dense float64 tables and the demo holds
# every request in one batch, so the upper bounds keep a run to seconds and megabytes.
BOUNDS = {
    "--gamma": (1, MAX_BLOCK, f"the toy drafter embeds {MAX_BLOCK} block positions"),
    "--bs": (1, 1024, "the demo needs at least one request; all of them run in one batch"),
    "--vocab": (2, 1024, "one token id is the drafter's mask token; the toy drafter takes an SVD of the V x V bigram table"),
    "--max-new": (1, 4096, "tokens generated per request"),
    "--quiet-above": (0, 1024, "requests shown step by step before a progress bar replaces them"),
    "--seed": (0, 2 ** 63 - 1, "torch generators take a signed 64-bit seed"),
}
MAX_TEMPERATURE = 100.0


def _bounds(flag: str) -> str:
    low, high, _ = BOUNDS[flag]
    return f"in [{low}, {high if high < 2 ** 32 else '2**63-1'}]"


def check_knobs(args) -> None:
    """Raise ValueError naming the first bad knob; the engine's own checks name config fields, not flags."""
    for flag, (low, high, why) in BOUNDS.items():
        value = getattr(args, flag[2:].replace("-", "_"))
        if not low <= value <= high:
            raise ValueError(f"{flag}: must lie {_bounds(flag)}, got {value} ({why})")
    if not (math.isfinite(args.temperature) and 0 <= args.temperature <= MAX_TEMPERATURE):
        raise ValueError(f"--temperature: must lie in [0, {MAX_TEMPERATURE:g}] (0 = greedy), got {args.temperature}")
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
    p.add_argument("--gamma", type=int, default=4, help=f"draft tokens per block, {_bounds('--gamma')}")
    p.add_argument("--bs", type=int, default=4, help=f"requests, all in one batch, {_bounds('--bs')}")
    p.add_argument("--vocab", type=int, default=16, help=f"toy vocabulary size, {_bounds('--vocab')}")
    p.add_argument("--max-new", type=int, default=24, help=f"tokens per request, {_bounds('--max-new')}")
    p.add_argument("--temperature", type=float, default=0.0, help=f"in [0, {MAX_TEMPERATURE:g}]; 0 = greedy")
    p.add_argument("--budget-frac", type=float, default=None, help="dspark_force_budget_frac in (0, 1]")
    p.add_argument("--overlap", action="store_true", help="overlap scheduling (inputs relayed through the FutureMap)")
    p.add_argument("--seed", type=int, default=0, help=f"{_bounds('--seed')}")
    p.add_argument("--quiet-above", type=int, default=8,
                   help=f"above this many requests, show a progress bar instead, {_bounds('--quiet-above')}")
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
