"""The statistical gate measured, not assumed: each statistical contract's false-alarm rate and power.

A statistical contract is run once on an engine under `stats.recording()`, which
yields the tests its gate saw: (name, law, n, per-test alpha). Under the null
hypothesis (an engine that samples the law exactly) a test's counts are
Multinomial(n, law), so its rejection rate is simulated directly with the gate's
own verdict function (`stats.rejections`). The tests of one run share rows, so
the family's false-alarm rate is bounded by the sum of the per-test rates (the
union bound, valid whatever their dependence); it is reported with a one-sided
95% upper bound.

Power is reported for named effect sizes: one test's law moved by total
variation delta (mass shifted from its likeliest cell to its least likely
positive cell), at the same n and alpha, for the family's weakest and
strongest test.

    python -m contracts.calibration [--draws N] [--contract ID ...] [--draw-share S]

prints the table the README carries; with `--draw-share S`, the same at a pack's draw share (the Monte-Carlo
contracts' rows times S, as `check` runs them outside `nightly` on that engine).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import torch

from contracts import stats
from contracts.registry import all_contracts

STAT_CONTRACTS = tuple(cid for cid, c in all_contracts().items() if "stat" in c.marks)  # the contracts that run the gate
EFFECTS = (0.01, 0.02, 0.05)  # total-variation shifts for the power table


@dataclass
class Family:
    contract_id: str
    tests: list  # (name, law, n, alpha) as the gate saw them
    draws: int = 0
    hits: list = field(default_factory=list)  # null rejections per test
    power: dict = field(default_factory=dict)  # effect -> (weakest, strongest) per-test detection rate

    @property
    def alpha(self) -> float:
        return self.tests[0][3]

    @property
    def rate(self) -> float:
        """Union-bound estimate of the family's false-alarm rate."""
        return sum(self.hits) / self.draws

    @property
    def upper(self) -> float:
        # Rare, nearly independent events: the total count is close to Poisson(draws * sum of rates).
        return stats.upper_bound(sum(self.hits), self.draws)


def shifted(law: torch.Tensor, delta: float) -> torch.Tensor:
    """`law` with mass `delta` moved from its likeliest cell to its least likely positive cell (TV = delta)."""
    out = law.clone()
    top = int(torch.argmax(law))
    # Another cell than the likeliest: on a uniform law (DIST-002's PIT bins) both are the first, and nothing moved.
    low = int(torch.where((law > 0) & (torch.arange(law.numel()) != top), law, 2.0).argmin())
    moved = min(delta, float(law[top]))
    out[top] -= moved
    out[low] += moved
    return out


def record(contract_id: str, engine) -> Family:
    """Run the contract once (it must pass) and keep the tests its gate saw."""
    from contracts.runner import run_contract

    with stats.recording() as seen:
        run_contract(all_contracts()[contract_id], engine, profile="ci")
    if not seen:
        raise ValueError(f"contract_id: {contract_id} ran no statistical gate")
    return Family(contract_id, list(seen))


def measure(family: Family, draws: int, power_draws: int = 2000, seed: int = 0) -> Family:
    family.draws = draws
    family.hits = [stats.simulated_rate(law, law, n, alpha, draws=draws, seed=seed + i)[0]
                   for i, (_, law, n, alpha) in enumerate(family.tests)]
    for delta in EFFECTS:
        rates = [stats.simulated_rate(shifted(law, delta), law, n, alpha, draws=power_draws, seed=seed + i)[0] / power_draws
                 for i, (_, law, n, alpha) in enumerate(family.tests)]
        family.power[delta] = (min(rates), max(rates))
    return family


def table(families) -> str:
    head = ("| contract | tests | per-test alpha | false alarm per run (union bound) | 95% upper | "
            + " | ".join(f"power at TV {d} (weakest / strongest test)" for d in EFFECTS) + " |")
    rows = [head, "|" + "---|" * (5 + len(EFFECTS))]
    for f in families:
        power = " | ".join(f"{lo:.0%} / {hi:.0%}" for lo, hi in (f.power[d] for d in EFFECTS))
        rows.append(f"| {f.contract_id} | {len(f.tests)} | {f.alpha:.1e} | {f.rate:.1e} | {f.upper:.1e} | {power} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m contracts.calibration", description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1_000_000, help="simulated null runs per test")
    parser.add_argument("--power-draws", type=int, default=2000, help="simulated runs per test and effect size")
    parser.add_argument("--contract", action="append", type=str.upper, choices=STAT_CONTRACTS,
                        help="a statistical contract id (default: all of them)")
    parser.add_argument("--draw-share", type=float, default=1.0,
                        help="run each contract's Monte-Carlo rows times this share, in (0, 1] (a pack's draw_shares)")
    args = parser.parse_args(argv)
    if args.draws < 1 or args.power_draws < 1:
        parser.error("--draws/--power-draws: must be positive")
    if not 0 < args.draw_share <= 1:
        parser.error("--draw-share: must be in (0, 1]")
    from contracts.engines import DEFAULT, load_engine

    engine = load_engine(DEFAULT)  # the statistical gate is calibrated on the default engine's laws
    ids = args.contract or STAT_CONTRACTS
    if args.draw_share < 1:
        engine.draw_shares = dict.fromkeys(ids, args.draw_share)
        print(f"draw share {args.draw_share:g}: each contract's Monte-Carlo rows times {args.draw_share:g}")
    families = [measure(record(cid, engine), args.draws, args.power_draws) for cid in ids]
    print(f"family-wise budget {stats.FAMILY_ALPHA:g} per contract run, effect-size floor TV {stats.TV_FLOOR}, "
          f"{args.draws:,} simulated null runs per test, {args.power_draws:,} per test and effect size")
    print(table(families))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
