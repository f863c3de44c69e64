"""Generate with the reference DSpark engine on the toy models and show what each step did.

    python -m dspark.demo [--drafter vanilla|gated|rnn|oracle|random] [--mode static|cap-accept|compact]
                          [--gamma 4] [--bs 4] [--max-new 24] [--temperature 0] [--budget-frac F] [--overlap]

Per step it prints the verify lengths L, the accept lengths (accepted drafts)
and tau, the tokens emitted per target forward (1 <= tau <= gamma+1). Long
runs (more than --quiet-above requests) show a tqdm progress bar instead.
"""

from __future__ import annotations

import argparse
import sys

from dspark.engine import VERIFY_MODES, DSparkConfig, DSparkEngine, Request, SamplingParams
from dspark.toy_models import DRAFTERS, ToyTarget, make_drafter, target_greedy_decode


def build(args) -> DSparkEngine:
    target = ToyTarget(args.vocab, seed=args.seed)
    cfg = DSparkConfig(gamma=args.gamma, verify_mode=args.mode, force_budget_frac=args.budget_frac,
                       enable_overlap=args.overlap, pool_size=max(args.bs, 1), seed=args.seed,
                       max_context_len=args.max_new + 16 + 2 * (args.gamma + 1))
    return DSparkEngine(target, make_drafter(args.drafter, target, seed=args.seed + 1), cfg)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m dspark.demo", description=__doc__.splitlines()[0])
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

        bar = tqdm(total=args.bs * args.max_new, unit="tok", desc="generating")

    def show(rec):
        if bar is not None:
            bar.update(sum(len(e) for e in rec.emitted))
            return
        budget = "-" if rec.budget is None else rec.budget
        print(f"step {rec.step:3d}  bs={len(rec.rids)}  budget={budget:>3}  verify_lens={rec.verify_lens}  "
              f"accept_lens={rec.correct_lens}  tau={rec.tokens_per_forward:.2f}")

    out = engine.generate(reqs, progress=show)
    if bar is not None:
        bar.close()
    steps = engine.records
    forwards = sum(len(r.rids) for r in steps)
    committed = sum(sum(r.commit_lens) for r in steps)
    print(f"{len(steps)} steps, mean tau = {committed / max(forwards, 1):.3f} tokens per target forward "
          f"(gamma+1 = {args.gamma + 1})")
    if args.temperature == 0:
        same = all(out[r.rid] == target_greedy_decode(engine.target, r.prompt, args.max_new) for r in reqs)
        print(f"greedy output == plain greedy decoding of the target: {same}")
    for r in reqs[: min(len(reqs), 4)]:
        print(f"request {r.rid}: prompt {list(r.prompt)} -> {out[r.rid]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
