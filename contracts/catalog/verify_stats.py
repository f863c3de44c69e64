"""Statistical losslessness contracts: Monte-Carlo goodness of fit against exact float64 laws.

These need only `sample_block` (the engine draws its own randomness from a
seed), so they apply to engines whose randomness cannot be injected
(FlashInfer). Each contract is one vectorised batch at fixed seeds, so its
verdict is reproducible. All of them go through one gate,
`contracts.stats.gate`: every test in a contract gets an equal share of a
family-wise false-alarm budget of 1e-3 (Bonferroni) and must also exceed an
effect-size floor (total variation 0.005) to fail; a token the law gives
probability 0 fails at once. `contracts.calibration` measures the gate's
false-alarm rate and power by simulation.

Losslessness is stated the way it is defined: each emitted block, continued by
sampling the target (the harness's own draws), follows the target's own law.
Any lossless rule passes LOSSLESS-003/004/005 (block verification too);
LOSSLESS-006 pins chain sampling's own laws and needs `verify.chain-sampling`.
Scenario laws come from `contracts.oracle` (float64, the target and draft
alone, no engine code) or are written out below.
"""

from __future__ import annotations

import torch

from contracts import budget, oracle, stats
from contracts.boundary.verify import VerifyInputs
from contracts.protocol import VERIFY, VERIFY_CHAIN
from contracts.registry import contract
from contracts.scenarios.verify import verify_step
from contracts.strategies.verify import family_rows
from contracts.violation import Mismatch

SEED = 20261130
N_POSITIONAL = 40_000  # rows per (draft kind) of the positional scenario at T = 1
N_TEMPERATURE = 20_000  # rows per (draft kind, temperature) of the temperature scenario
TEMPERATURES = (0.5, 1.7)
N_PER_CAP = 8_000  # rows per (draft kind, verify length) group of the Markov scenario


def _inputs(cand, p, q, lens=None) -> VerifyInputs:
    n, width = cand.shape
    # Logits whose softmax is p: an engine that builds its own target law from logits reads the same law.
    return VerifyInputs(cand, p.log(), p, q, torch.zeros(n, width - 1, dtype=torch.float64),
                        torch.ones(n, p.shape[-1], dtype=torch.float64), lens, torch.zeros(n, dtype=torch.bool),
                        torch.zeros(n, dtype=torch.int64))


def _committed_in_range(r, vocab: int, label: str) -> None:
    """The engine's committed tokens are ids in [0, V) and commit_len in [1, width]: a -1 or an id past the
    vocabulary is the engine's failure, named here, not a crash of the harness's counting (bincount) below."""
    out, commit = r.out_tokens.to(torch.int64), r.commit_len.to(torch.int64)
    width = out.shape[1]
    bad_len = ((commit < 1) | (commit > width)).nonzero()
    if bad_len.numel():
        i = bad_len[0, 0].item()
        raise Mismatch(f"{label}: commit_len of row {i}", f"in [1, {width}]", commit[i].item())
    committed = torch.arange(width)[None, :] < commit[:, None]
    bad = (committed & ((out < 0) | (out >= vocab))).nonzero()
    if bad.numel():
        i, k = bad[0].tolist()
        raise Mismatch(f"{label}: out_tokens[{i}, {k}] (within commit_len {commit[i].item()})",
                       f"a token id in [0, {vocab})", f"{out[i, k].item()} ({bad.shape[0]} such tokens in "
                       f"{out.shape[0]} rows; row {i}: {out[i].tolist()})")


def _continued(r, width: int, next_rows, first_prev) -> torch.Tensor:
    """Each emitted block continued to `width` tokens by sampling the target with the harness's own generator.

    next_rows(k, prev) gives the target rows [n, V] at position k after token `prev` [n].
    """
    gen = torch.Generator().manual_seed(SEED + 99)
    seq = r.out_tokens.to(torch.int64)[:, :width].clone()
    commit = r.commit_len.to(torch.int64)
    prev = first_prev
    for k in range(width):
        drawn = torch.multinomial(next_rows(k, prev), 1, generator=gen)[:, 0]
        seq[:, k] = torch.where(commit <= k, drawn, seq[:, k])
        prev = seq[:, k]
    return seq


def _row_counts(rows: torch.Tensor) -> dict:
    blocks, freq = torch.unique(rows, dim=0, return_counts=True)
    return {tuple(b): f for b, f in zip(blocks.tolist(), freq.tolist())}


# ---- positional scenario: target and draft rows depend on the position only ----------------------


def _positional_rows(gen, gamma, v):
    """Target rows that differ per position, and draft rows with a zero where the target has mass."""
    p = family_rows(gen, "dense", gamma + 1, v)
    q = family_rows(gen, "dense", gamma, v)
    q[:, 0] = 0.0  # the draft never proposes token 0, which the target likes
    p[:, 0] += 0.2
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


def _positional_scenario(seed, temperatures):
    """Per (draft kind, temperature): rows p, q and a verify batch whose drafts are drawn from q."""
    gen = torch.Generator().manual_seed(seed)
    gamma, v = 3, 8
    for kind in ("sampled", "one_hot"):
        for t in temperatures:
            n = budget.rows(N_POSITIONAL if t == 1.0 else N_TEMPERATURE)
            p, q = _positional_rows(gen, gamma, v)
            if kind == "one_hot":  # a point-mass draft proposing the target's likely tokens (a sharpened target)
                q = p[:gamma] ** 4 / (p[:gamma] ** 4).sum(-1, keepdim=True)
            drafts = torch.stack([torch.multinomial(q[k], n, replacement=True, generator=gen) for k in range(gamma)], 1)
            cand = torch.cat([torch.zeros(n, 1, dtype=torch.int64), drafts], 1)
            inputs = _inputs(cand, p.expand(n, -1, -1), None if kind == "one_hot" else q.expand(n, -1, -1))
            if t != 1.0:  # logits T*log(p): the engine must divide by T before it compares
                inputs = inputs.replace(target_logits=t * p.log().expand(n, -1, -1),
                                        temperatures=torch.full((n,), t, dtype=torch.float64))
            yield f"{kind} drafts, T={t}", kind, p, q, inputs


def _positional_losslessness(engine, seed, temperatures) -> None:
    tests = []
    for label, _, p, _, inputs in _positional_scenario(seed, temperatures):
        r = verify_step(engine, inputs, "block", seed=seed + len(tests))
        _committed_in_range(r, inputs.vocab, label)
        seq = _continued(r, inputs.gamma + 1, lambda k, _: p[k].expand(inputs.bs, -1), None)
        tests += [(f"{label}: token at position {k} of the continued block", torch.bincount(seq[:, k], minlength=p.shape[1]),
                   p[k]) for k in range(inputs.gamma + 1)]
    stats.gate(tests)


@contract("LOSSLESS-003", "Monte-Carlo, per position: with position-dependent target and draft rows (sampled and one-hot "
          "drafts), each emitted block continued by sampling the target follows the target row at every position "
          "(chi-square, family-wise false alarm <= 1e-3); any lossless rule passes, chain sampling or not",
          requires={VERIFY}, marks=("stat",))
def positional_losslessness(engine):
    _positional_losslessness(engine, SEED, (1.0,))


@contract("LOSSLESS-005", "Monte-Carlo, temperatures other than 1: with target logits T*log(p) at T = 0.5 and 1.7 and "
          "sampled or one-hot drafts, each emitted block continued by sampling p follows p at every position, so the "
          "engine divides by T before it compares (family-wise false alarm <= 1e-3)",
          requires={VERIFY}, marks=("stat",))
def temperature_losslessness(engine):
    _positional_losslessness(engine, SEED + 2, TEMPERATURES)


# ---- Markov scenario: whole blocks, every verify length ------------------------------------------


def _markov_scenario(seed):
    """A Markov target over 3 tokens and, per draft kind, a verify batch at every length L in 1..gamma+1."""
    gen = torch.Generator().manual_seed(seed)
    v, gamma, anchor = 3, 3, 1
    target = family_rows(gen, "dense", v, v)
    tables = {"sampled": family_rows(gen, "dense", v, v),
              "one_hot": torch.eye(v, dtype=torch.float64).roll(1, 0)}  # deterministic draft: v -> v+1 mod V
    lens = torch.arange(1, gamma + 2).repeat_interleave(budget.rows(N_PER_CAP))
    for kind, table in tables.items():
        cand = [torch.full((lens.numel(),), anchor)]
        for _ in range(gamma):
            cand.append(torch.multinomial(table[cand[-1]], 1, generator=gen)[:, 0])
        cand = torch.stack(cand, 1)
        q = None if kind == "one_hot" else table[cand[:, :gamma]]
        yield kind, target, table, anchor, lens, _inputs(cand, target[cand], q, lens)


@contract("LOSSLESS-004", "Monte-Carlo, losslessness over a whole block: with a Markov target, sampled and one-hot Markov "
          "drafts and each verify length L in 1..gamma+1, the emitted block (accepted drafts + bonus) continued by "
          "sampling the target up to gamma+1 tokens follows the target's own law over gamma+1 tokens (chi-square over "
          "sequences, family-wise false alarm <= 1e-3); any lossless rule passes, chain sampling or not",
          requires={VERIFY}, marks=("stat",))
def block_losslessness(engine):
    tests = []
    for kind, target, _, anchor, lens, inputs in _markov_scenario(SEED + 1):
        r = verify_step(engine, inputs, "block", seed=SEED + 10 + len(tests))
        _committed_in_range(r, inputs.vocab, f"{kind} drafts")
        seq = _continued(r, inputs.gamma + 1, lambda _, prev: target[prev], torch.full((inputs.bs,), anchor))
        law = oracle.continuation_law(oracle.markov(target), (anchor,), inputs.gamma + 1)
        for length in range(1, inputs.gamma + 2):
            tests.append(stats.table_test(f"{kind} drafts, L={length}: block continued by the target",
                                          _row_counts(seq[lens == length]), law))
    stats.gate(tests)


def _emitted_blocks(r, rows) -> dict:
    counts: dict = {}
    commit = r.commit_len.to(torch.int64)[rows]
    out = r.out_tokens.to(torch.int64)[rows]
    for length in commit.unique().tolist():
        counts.update(_row_counts(out[commit == length, :length]))
    return counts


@contract("LOSSLESS-006", "Monte-Carlo, chain sampling's own laws: with a Markov target, sampled and one-hot Markov drafts "
          "and each verify length L in 1..gamma+1, the emitted block itself (accepted drafts + bonus) follows the "
          "exact chain-sampling law from the float64 oracle; with position-only rows the accepted-draft count follows "
          "prod(alpha_<n) * (1 - alpha_n) (family-wise false alarm <= 1e-3). Only for engines that verify by chain "
          "sampling; the oracle's own losslessness is LOSSLESS-002's subject",
          requires={VERIFY, VERIFY_CHAIN}, marks=("stat",))
def chain_sampling_laws(engine):
    tests = []
    for kind, target, table, anchor, lens, inputs in _markov_scenario(SEED + 1):
        r = verify_step(engine, inputs, "block", seed=SEED + 10 + len(tests))
        _committed_in_range(r, inputs.vocab, f"{kind} drafts")
        for length in range(1, inputs.gamma + 2):
            law = oracle.emitted_block_law(oracle.markov(target), oracle.markov(table), inputs.gamma, prefix=(anchor,),
                                           verify_len=length)
            tests.append(stats.table_test(f"{kind} drafts, L={length}: emitted block", _emitted_blocks(r, lens == length), law))
    for label, kind, p, q, inputs in _positional_scenario(SEED, (1.0,)):
        r = verify_step(engine, inputs, "block", seed=SEED + 10 + len(tests))
        raw = r.correct_len.to(torch.int64)
        gamma = inputs.gamma
        bad = ((raw < 0) | (raw > gamma)).nonzero()
        if bad.numel():  # bincount below needs it in range; outside it is the engine's failure
            i = bad[0, 0].item()
            raise Mismatch(f"{label}: correct_len of row {i}", f"in [0, {gamma}]", raw[i].item())
        law = oracle.accept_count_law(p, q, one_hot=kind == "one_hot")
        tests.append((f"{label}: accepted-draft count", torch.bincount(raw, minlength=gamma + 1), law))
    stats.gate(tests)
