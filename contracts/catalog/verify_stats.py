"""Statistical losslessness contracts: Monte-Carlo goodness of fit against exact float64 laws.

These need only `sample_block` (the engine draws its own randomness from a
seed), so they apply to engines whose randomness cannot be injected
(FlashInfer). Each contract is one vectorised batch at fixed seeds, so its
verdict is reproducible. Every test in a contract gets an equal share of a
family-wise false-alarm budget of 1e-6 (Bonferroni) and must also exceed an
effect-size floor (total variation 0.005) to fail; a token the law gives
probability 0 fails at once. See `contracts.stats`.

Scenario laws come from `contracts.oracle` (float64, the target and draft
alone, no engine code) or are written out below.
"""

from __future__ import annotations

import torch

from contracts import oracle, stats
from contracts.boundary.verify import VerifyInputs
from contracts.checks import expect
from contracts.protocol import VERIFY
from contracts.registry import contract
from contracts.scenarios.verify import verify_step
from contracts.strategies.verify import family_rows

SEED = 20261130
N_POSITIONAL = 40_000  # rows per positional scenario
N_PER_CAP = 8_000  # rows per (draft kind, verify length) group of the Markov scenario


def _inputs(cand, p, q, lens=None) -> VerifyInputs:
    n, width = cand.shape
    # Logits whose softmax is p: an engine that builds its own target law from logits reads the same law.
    return VerifyInputs(cand, p.log(), p, q, torch.zeros(n, width - 1, dtype=torch.float64),
                        torch.ones(n, p.shape[-1], dtype=torch.float64), lens, torch.zeros(n, dtype=torch.bool),
                        torch.zeros(n, dtype=torch.int64))


def _gate(tests: list) -> None:
    """tests: (name, counts, law). Fail on the first test the Bonferroni-split gate rejects."""
    __tracebackhide__ = True
    alpha = stats.bonferroni(stats.FAMILY_ALPHA, len(tests))
    for name, counts, law in tests:
        result = stats.chi_square_gof(counts, law)
        expect(not result.rejects(alpha), f"{name} goodness of fit",
               f"p >= {alpha:.2g} or TV <= {stats.TV_FLOOR} (family-wise false alarm <= {stats.FAMILY_ALPHA})",
               result.describe())


def _positional_rows(gen, gamma, v):
    """Target rows that differ per position, and draft rows with a zero where the target has mass."""
    p = family_rows(gen, "dense", gamma + 1, v)
    q = family_rows(gen, "dense", gamma, v)
    q[:, 0] = 0.0  # the draft never proposes token 0, which the target likes
    p[:, 0] += 0.2
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


def _position_tests(label, correct_len, out_tokens, p_rows) -> list:
    tests = []
    for k in range(p_rows.shape[0]):
        reached = correct_len >= k
        tokens = out_tokens[reached, k]
        tests.append((f"{label}: token at position {k} ({int(reached.sum())} rows)",
                      torch.bincount(tokens, minlength=p_rows.shape[1]), p_rows[k]))
    return tests


@contract("LOSSLESS-003", "Monte-Carlo, per position: with position-dependent target and draft rows (sampled and one-hot "
          "drafts), the token emitted at each position follows the target row there, and the accepted-draft count "
          "follows prod(alpha_<n) * (1 - alpha_n) (chi-square, family-wise false alarm <= 1e-6)",
          requires={VERIFY}, marks=("stat",))
def positional_goodness_of_fit(engine):
    gen = torch.Generator().manual_seed(SEED)
    gamma, v, n = 3, 8, N_POSITIONAL
    tests = []
    for kind in ("sampled", "one_hot"):
        p, q = _positional_rows(gen, gamma, v)
        if kind == "one_hot":  # a point-mass draft proposes the target's likely tokens (a sharpened target)
            q = p[:gamma] ** 4 / (p[:gamma] ** 4).sum(-1, keepdim=True)
        drafts = torch.stack([torch.multinomial(q[k], n, replacement=True, generator=gen) for k in range(gamma)], 1)
        cand = torch.cat([torch.zeros(n, 1, dtype=torch.int64), drafts], 1)
        inputs = _inputs(cand, p.expand(n, -1, -1), None if kind == "one_hot" else q.expand(n, -1, -1))
        r = verify_step(engine, inputs, "block", seed=SEED + len(tests))
        c = r.correct_len.to(torch.int64)
        # Acceptance at position k: sum min(p, q) for a sampled q; sum q(d) p(d) for a point-mass draft.
        alpha = (q * p[:gamma]).sum(-1) if kind == "one_hot" else torch.minimum(p[:gamma], q).sum(-1)
        survive = torch.cat([torch.ones(1, dtype=torch.float64), torch.cumprod(alpha, 0)])
        law = survive * torch.cat([1 - alpha, torch.ones(1, dtype=torch.float64)])
        tests.append((f"{kind} drafts: accepted-draft count", torch.bincount(c, minlength=gamma + 1), law))
        tests += _position_tests(f"{kind} drafts", c, r.out_tokens.to(torch.int64), p)
    _gate(tests)


def _block_counts(r, rows) -> dict:
    counts: dict = {}
    commit = r.commit_len.to(torch.int64)[rows]
    out = r.out_tokens.to(torch.int64)[rows]
    for length in commit.unique().tolist():
        blocks, freq = torch.unique(out[commit == length, :length], dim=0, return_counts=True)
        for block, f in zip(blocks.tolist(), freq.tolist()):
            counts[tuple(block)] = f
    return counts


@contract("LOSSLESS-004", "Monte-Carlo, whole block: with a Markov target, sampled and one-hot Markov drafts and each verify "
          "length L in 1..gamma+1, the law of the emitted block (accepted drafts + bonus) is the exact chain-sampling "
          "law from the float64 oracle (chi-square over blocks, family-wise false alarm <= 1e-6); the oracle's own "
          "losslessness is LOSSLESS-002's subject",
          requires={VERIFY}, marks=("stat",))
def block_goodness_of_fit(engine):
    gen = torch.Generator().manual_seed(SEED + 1)
    v, gamma, anchor = 3, 3, 1
    target = family_rows(gen, "dense", v, v)
    drafts = {"sampled": family_rows(gen, "dense", v, v),
              "one_hot": torch.eye(v, dtype=torch.float64).roll(1, 0)}  # deterministic draft: v -> v+1 mod V
    tests = []
    for kind, table in drafts.items():
        lens = torch.arange(1, gamma + 2).repeat_interleave(N_PER_CAP)
        n = lens.numel()
        cand = [torch.full((n,), anchor)]
        for _ in range(gamma):
            cand.append(torch.multinomial(table[cand[-1]], 1, generator=gen)[:, 0])
        cand = torch.stack(cand, 1)
        inputs = _inputs(cand, target[cand], None if kind == "one_hot" else table[cand[:, :gamma]], lens)
        r = verify_step(engine, inputs, "block", seed=SEED + 10 + len(tests))
        for length in range(1, gamma + 2):
            law = oracle.emitted_block_law(oracle.markov(target), oracle.markov(table), gamma, prefix=(anchor,),
                                           verify_len=length)
            counts = _block_counts(r, lens == length)
            keys = sorted(set(law) | set(counts))
            tests.append((f"{kind} drafts, L={length}: emitted block",
                          torch.tensor([counts.get(k, 0) for k in keys]),
                          torch.tensor([law.get(k, 0.0) for k in keys], dtype=torch.float64)))
    _gate(tests)


TEMPERATURES = (0.5, 1.7)
N_TEMPERATURE = 20_000


@contract("LOSSLESS-005", "Monte-Carlo, temperatures other than 1: with target logits T*log(p) at T = 0.5 and 1.7 and "
          "drafts sampled from q, the token emitted at each position follows p there (the engine divides by T before "
          "it compares), and the accepted-draft count follows prod(alpha_<n) * (1 - alpha_n) (family-wise false "
          "alarm <= 1e-6)", requires={VERIFY}, marks=("stat",))
def temperature_goodness_of_fit(engine):
    gen = torch.Generator().manual_seed(SEED + 2)
    gamma, v, n = 3, 8, N_TEMPERATURE
    tests = []
    for t in TEMPERATURES:
        p, q = _positional_rows(gen, gamma, v)
        drafts = torch.stack([torch.multinomial(q[k], n, replacement=True, generator=gen) for k in range(gamma)], 1)
        cand = torch.cat([torch.zeros(n, 1, dtype=torch.int64), drafts], 1)
        inputs = _inputs(cand, p.expand(n, -1, -1), q.expand(n, -1, -1)).replace(
            target_logits=t * p.log().expand(n, -1, -1), temperatures=torch.full((n,), t, dtype=torch.float64))
        r = verify_step(engine, inputs, "block", seed=SEED + 20 + len(tests))
        c = r.correct_len.to(torch.int64)
        alpha = torch.minimum(p[:gamma], q).sum(-1)
        survive = torch.cat([torch.ones(1, dtype=torch.float64), torch.cumprod(alpha, 0)])
        law = survive * torch.cat([1 - alpha, torch.ones(1, dtype=torch.float64)])
        tests.append((f"T={t}: accepted-draft count", torch.bincount(c, minlength=gamma + 1), law))
        tests += _position_tests(f"T={t}", c, r.out_tokens.to(torch.int64), p)
    _gate(tests)
