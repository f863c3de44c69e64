"""The draft law: the drafts a step verifies were drawn from the law its accept scores them with.

Speculative sampling is lossless only if each verified draft x_k was drawn from exactly the law q_k the accept
divides by, and if the choice of which drafts to verify never reads the draft it admits (the paper's
non-anticipation condition: a confidence that reads x_k, as position k+1's does, must not decide whether x_k is
verified). Both are tested at once, from first principles, by the randomized probability integral transform:
for a verified draft x with law q over ids 0..V-1, u = F(x-1) + v * q(x), with F the cumulative law and v a
uniform draw keyed by (configuration, step, request, position). If x ~ q given everything the choice to verify it
read, every u is Uniform(0, 1) whatever q is, so the pooled u's of every step and request fall evenly in equal
bins. A draft drawn at another temperature, from the law before a Markov bias, or a cut that keeps a draft for
being likely moves mass between bins; the one statistical gate (contracts.stats) judges the bin counts. The exact
parts need no statistics: the verified drafts are a prefix of the block drawn, each law is a distribution, and
no verified draft has probability 0 under its own law. The first configuration runs again with each engine option
that moves the draws on (a drafter's own confidence truncation, overlap): where a cut is made is where it could
anticipate. One configuration per option keeps the cost bounded on an engine with several such options.

DRAFT-004 asks the same of the draft level alone, where the contract chooses the logits: a Markov block drawn from
given per-position logits and bias table, each draft's PIT taken under the law it is defined to be drawn from.
"""

from __future__ import annotations

import hashlib

import torch

from contracts import budget, stats
from contracts.boundary.engine import EngineSpec, RequestSpec
from contracts.catalog.decode_loop import MAX_STEPS
from contracts.checks import expect, expect_equal
from contracts.machine import join_via, single_thread
from contracts.protocol import DRAFT_MARKOV, OPTIONS, STEP, STEP_DRAFT_DRAWS
from contracts.registry import contract
from contracts.step_modes import law_configs

DRAW_VOCAB, DRAW_GAMMA, DRAW_N, DRAW_TOKENS = 6, 4, 120, 12
DRAW_PROMPT = (1, 2, 3)
PIT_BINS = 10
LAW_ATOL = 1e-5  # engines score in float32: a law's sum drifts by a few ulps per id
# (verify mode, forced budget fraction, drafter, temperature). The Markov heads make q_k depend on the draft before
# it; the ragged modes cut blocks by the current confidence, which reads the draft before each position.
DRAW_CONFIGS = (("static", None, "vanilla", 1.0), ("static", None, "gated", 0.6),
                ("cap-accept", 0.5, "vanilla", 1.0), ("compact", 0.25, "rnn", 1.3))


def pit_uniform(key: str) -> float:
    """The v of one PIT value: a uniform keyed by the draw's coordinates, not by a stream's position."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:7], "big") / float(1 << 56)


def pit(q: torch.Tensor, token: int, v: float) -> float:
    """Randomized PIT of `token` under the law `q`: Uniform(0, 1) when token ~ q."""
    below = float(q[:token].sum()) if token else 0.0
    return min(max(below + v * float(q[token]), 0.0), 1.0 - 1e-12)


def _drawn(engine, handle, name: str, step: int, rids, bins: list) -> None:
    draws = list(engine.draft_draws(handle))
    # Every row of these configurations samples, so each owes its draws (none reported would check nothing).
    expect_equal(f"{name} step {step}: requests whose drafts the step reports", sorted(rids), sorted(d.rid for d in draws))
    for d in draws:
        where = f"{name} step {step} request {d.rid}"
        n = len(d.verified)
        expect_equal(f"{where}: verified drafts (a prefix of the block drawn)", tuple(d.block[:n]), tuple(d.verified))
        q = d.draft_probs.to(torch.float64)
        # One law per verified draft, over at least the vocabulary (a model may pad its own past it).
        expect(q.dim() == 2 and q.shape[0] == n and q.shape[1] >= DRAW_VOCAB, f"{where}: draft laws reported",
               f"[{n}, >= {DRAW_VOCAB}]", list(q.shape))
        for k, x in enumerate(d.verified):
            total, low = float(q[k].sum()), float(q[k].min())
            expect(abs(total - 1) <= LAW_ATOL and low >= 0, f"{where} draft {k}: its law", "a distribution",
                   f"sum {total:.9g}, min {low:.3g}")
            expect(float(q[k, x]) > 0, f"{where} draft {k}: the probability of the draft {x} under its own law",
                   "> 0 (it was drawn from that law)", float(q[k, x]))
            u = pit(q[k], int(x), pit_uniform(f"{name}/{step}/{d.rid}/{k}"))
            bins[min(int(u * PIT_BINS), PIT_BINS - 1)] += 1


def draw_moving_options(engine) -> tuple:
    """The engine's options that move which drafts are drawn or verified and promise only the law (output-preserving,
    not same-seed: a drafter's own confidence threshold, which cuts each proposal; overlap scheduling): DIST-002 runs
    its first configuration again with each one on, (name, value) as the engine spells it."""
    if OPTIONS not in engine.capabilities:
        return ()
    return tuple((o.name, o.value) for o in engine.engine_options
                 if o.kind == "output-preserving" and not o.same_seed and not o.not_exercised)


@contract("DIST-002", "the drafts each step verifies follow the law its accept scores them with, and which drafts are "
          "verified never depends on the draft itself (non-anticipation): the verified drafts are a prefix of the block "
          "drawn, and their randomized PIT values under their own laws are uniform (static with vanilla and gated "
          "Markov heads, cap-accept/compact at forced fractions 0.5 and 0.25; static vanilla again with each option that "
          "moves the draws on, e.g. a confidence truncation; fixed seeds; one gate, family-wise false alarm <= 1e-3)",
          requires={STEP, STEP_DRAFT_DRAWS}, marks=("stat",))
def draft_law(engine):
    runs = law_configs(engine, DRAW_CONFIGS)
    runs = [(c, ()) for c in runs] + [(runs[0], (o,)) for o in draw_moving_options(engine)]
    family = stats.Gate(len(runs))
    uniform = {b: 1.0 / PIT_BINS for b in range(PIT_BINS)}
    with single_thread():
        n = budget.rows(DRAW_N)
        for seed, ((mode, frac, drafter, temperature), options) in enumerate(runs):
            name = f"{mode} frac={frac} {drafter} T={temperature}" + "".join(f" {k}={v}" for k, v in options)
            spec = EngineSpec(vocab_size=DRAW_VOCAB, gamma=DRAW_GAMMA, drafter=drafter, verify_mode=mode,
                              force_budget_frac=frac, seed=200 + seed, model_seed=7, pool_size=n,
                              max_context_len=32, options=options)
            handle = engine.new_engine(spec)
            engine.add_requests(handle, [RequestSpec(i, DRAW_PROMPT, temperature, DRAW_TOKENS)
                                         for i in range(n)], join_via(engine, "local"))
            bins = [0] * PIT_BINS
            live = {v.rid for v in engine.request_views(handle) if v.live}
            for step in range(MAX_STEPS):
                if not live:
                    break
                view = engine.step(handle)
                _drawn(engine, handle, name, step, view.rids, bins)
                live -= set(view.finished)
            expect(not live, f"{name}: generation", f"done within {MAX_STEPS} steps", f"requests {sorted(live)} running")
            family.check(*stats.table_test(f"{name}: PIT of the verified drafts ({sum(bins)})",
                                           dict(enumerate(bins)), uniform))


# DRAFT-004: one Markov block per request, from logits the contract chooses. (name, temperature per row): a batch
# mixing greedy and sampled rows, and two temperatures away from 1, where a draw that skips T moves the most mass.
BLOCK_VOCAB, BLOCK_N, BLOCK_BS = 6, 4, 240
BLOCK_CONFIGS = (("mixed T=0/1", (0.0, 1.0)), ("T=0.5", (0.5,)), ("T=1.5", (1.5,)))
LOGIT_ATOL = 1e-5  # engines hold the logits in float32


def _markov_case(seed: int, temps: tuple, bs: int):
    """Per-position base logits, a Markov bias table, anchors, per-row temperatures, seeds and anchor positions."""
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(bs, BLOCK_N, BLOCK_VOCAB, generator=gen)
    bias = 2 * torch.randn(BLOCK_VOCAB, BLOCK_VOCAB, generator=gen)  # strong enough that the previous token matters
    anchors = torch.randint(0, BLOCK_VOCAB, (bs,), generator=gen)
    temperatures = torch.tensor([temps[r % len(temps)] for r in range(bs)], dtype=torch.float32)
    seeds = 1000 * seed + torch.arange(bs)
    positions = torch.randint(1, 512, (bs,), generator=gen)
    return base, bias, anchors, temperatures, seeds, positions


@contract("DRAFT-004", "a Markov block's drafts follow the law its verify reads: the logits left for draft k are "
          "base_k + bias[previous token] (the anchor, then the block's own drafts; equal up to a constant), greedy "
          "drafts are their argmax, and sampled drafts' randomized PIT values under softmax(logits / T) are uniform "
          "(a batch mixing T=0 and T=1 rows, T=0.5, T=1.5; fixed seeds; one gate, family-wise false alarm <= 1e-3)",
          requires={DRAFT_MARKOV}, marks=("stat",))
def markov_block_law(engine):
    family = stats.Gate(len(BLOCK_CONFIGS))
    uniform = {b: 1.0 / PIT_BINS for b in range(PIT_BINS)}
    bs = budget.rows(BLOCK_BS)
    with single_thread():
        for seed, (name, temps) in enumerate(BLOCK_CONFIGS, start=1):
            base, bias, anchors, temperatures, seeds, positions = _markov_case(seed, temps, bs)
            drafts, logits = engine.markov_draft(base, bias, anchors, temperatures, seeds, positions)
            drafts, logits = torch.as_tensor(drafts), torch.as_tensor(logits)
            expect_equal(f"{name}: drafts shape", (bs, BLOCK_N), tuple(drafts.shape))
            expect_equal(f"{name}: logits shape", (bs, BLOCK_N, BLOCK_VOCAB), tuple(logits.shape))
            bins = [0] * PIT_BINS
            prev = anchors.to(torch.int64)
            for k in range(BLOCK_N):
                law_logits = base[:, k].double() + bias.double()[prev]  # what draft k is defined to be drawn from
                left = logits[:, k].double()
                shift = (left - law_logits).mean(-1, keepdim=True)  # a constant per row leaves the law unchanged
                gap = (left - law_logits - shift).abs().amax(-1)
                row = int(gap.argmax())
                expect(float(gap[row]) <= LOGIT_ATOL, f"{name} request {row} draft {k}: the logits left for the verify",
                       f"base + bias[{int(prev[row])}] (up to a constant)", f"off by {float(gap[row]):.3g}")
                x = drafts[:, k].to(torch.int64)
                bad = ((x < 0) | (x >= BLOCK_VOCAB)).nonzero()
                expect(len(bad) == 0, f"{name} draft {k}: ids", f"in [0, {BLOCK_VOCAB})", drafts[bad[:1, 0], k].tolist())
                for r in range(bs):
                    t, token = float(temperatures[r]), int(x[r])
                    if t == 0:
                        top = float(law_logits[r].max())
                        expect(float(law_logits[r, token]) >= top - LOGIT_ATOL, f"{name} request {r} draft {k} (greedy)",
                               f"the argmax {int(law_logits[r].argmax())}", token)
                        continue
                    u = pit(torch.softmax(law_logits[r] / t, -1), token, pit_uniform(f"DRAFT-004/{name}/{r}/{k}"))
                    bins[min(int(u * PIT_BINS), PIT_BINS - 1)] += 1
                prev = x
            family.check(*stats.table_test(f"{name}: PIT of the sampled drafts ({sum(bins)})", dict(enumerate(bins)),
                                           uniform))
