"""A DP-attention rank's whole step, in every verify mode and step kind, under SGLang's names.

`dspark.dp_runner` holds the draft side of a decode step; this module holds what a DP group runs step after step
(`STEP_KINDS`): a local prefill (EXTEND over the prompts), a decode step (draft forward, then the target verify in
the run's verify mode), the first decode of requests that joined through a PD handoff (`process_prebuilt`), and a
step where no rank has a request. A rank without requests (idle) runs every step too: the forward modes of the DP
group differ, the collectives do not. Per step, on every rank, in order (`OPS`):

1. ``sync``: all-gathers ``[step, requests, forward tokens]`` (SGLang's MLP-sync gather);
2. the step's first forward batch, with its DP metadata filled by the engine's own code: the proposer's fill
   (decode, handoff, idle; `run_idle_participation` on an idle rank) or `init_mlp_sync_metadata` (prefill);
3. ``forward_tokens``: all-gathers the forward's rows, padded to the largest per-rank count, each peer's chunk
   trimmed to the count this rank holds for it;
4. the verify plan (decode and handoff steps; no verify rows otherwise): static verifies every request's T tokens,
   cap-accept plans lengths (`planner.plan_step`) on the strided layout, compact packs the planned rows
   (`RaggedVerifyLayout`); then ``verify_plan``: the ranks agree how many verify rows each one runs
   (`dp_padding.coordinate`, the captured token sizes `capture_num_tokens(capture_bs, T)` as graphs);
5. ``verify_tokens``: all-gathers the verify rows, padded to the largest agreed count, each chunk trimmed to that
   rank's real rows; then the rank accepts its own rows (`verify.greedy_accept`, `verify.finalize`).

Every rank reports plain data per step. `StepRankProgram(rank, cfg, comm)` talks to its peers only through ``comm``
(the interface `dspark.dp_runner` describes).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch

# Modules, not names: a rank looks each function up when it runs, so a patch in the parent reaches forked ranks. Imported
# here so that ranks fork with them loaded.
from dspark import (
    _validate,
    disaggregation,
    dp_padding,
    draft_input,
    dspark_draft,
    forward_batch_info,
    graph_buckets,
    overlap_utils,
    planner,
    schedule_batch,
    spec_info,
    verify,
)

OPS = ("sync", "forward_tokens", "verify_plan", "verify_tokens")
STEP_KINDS = ("prefill", "decode", "handoff", "idle")
VERIFY_KINDS = ("decode", "handoff")  # the kinds whose step runs a target verify
VERIFY_MODES = ("static", "cap-accept", "compact")  # dspark.engine.VERIFY_MODES
ROW_FIELDS = ("token", "src_rank", "req", "pos")
PAD = -1
VOCAB = 8  # the verify's target logits: a small vocabulary, so that drafts are accepted often
NO_THRESHOLD = 1 << 30  # the verify forward is never split into microbatches


@dataclass(frozen=True)
class StepRunConfig:
    """The steps run once per verify mode in `verify_modes` (each mode on a fresh proposer, as a fresh server would),
    every step of the first mode first. `kinds[s]` is step s's kind; `batch_sizes[s][r]` rank r's requests (0 =
    idle); `prompt_lens[s][r]` the prompt lengths of rank r's requests at a prefill step (empty tuples elsewhere);
    `capture_bs` the captured batch sizes (() = no graphs); `budget_frac` the forced verify budget fraction of the
    ragged modes (None: the flat table)."""

    world_size: int
    verify_modes: Tuple[str, ...]
    gamma: int
    kinds: Tuple[str, ...]
    batch_sizes: Tuple[Tuple[int, ...], ...]
    prompt_lens: Tuple[Tuple[Tuple[int, ...], ...], ...]
    capture_bs: Tuple[int, ...] = ()
    budget_frac: Optional[float] = None
    sample_from_anchor: bool = True
    seed: int = 0

    def __post_init__(self):
        validate_config(self)

    @property
    def steps(self) -> int:
        """Steps the ranks run: every step in each verify mode."""
        return len(self.verify_modes) * len(self.kinds)

    def at(self, run_step: int) -> Tuple[str, int]:
        """(verify mode, step of `kinds`) of one step the ranks run."""
        return self.verify_modes[run_step // len(self.kinds)], run_step % len(self.kinds)

    @property
    def query_token_num(self) -> int:
        return spec_info.draft_query_width(self.gamma, self.sample_from_anchor)


def validate_config(cfg: StepRunConfig) -> None:
    _validate.positive_int("world_size", cfg.world_size)
    _validate.positive_int("gamma", cfg.gamma)
    modes = cfg.verify_modes
    if not isinstance(modes, tuple) or not modes or any(m not in VERIFY_MODES for m in modes) or len(set(modes)) != len(modes):
        raise ValueError(f"verify_modes: expected distinct modes of {VERIFY_MODES}, got {modes!r}")
    if not cfg.kinds or any(k not in STEP_KINDS for k in cfg.kinds):
        raise ValueError(f"kinds: expected one or more of {STEP_KINDS}, got {cfg.kinds!r}")
    if len(cfg.batch_sizes) != len(cfg.kinds) or len(cfg.prompt_lens) != len(cfg.kinds):
        raise ValueError(f"batch_sizes, prompt_lens: expected one row per step ({len(cfg.kinds)})")
    for s, (kind, row, prompts) in enumerate(zip(cfg.kinds, cfg.batch_sizes, cfg.prompt_lens)):
        row = _validate.count_list(f"batch_sizes[{s}]", row, length=cfg.world_size)
        if kind == "idle" and any(row):
            raise ValueError(f"batch_sizes[{s}]: an idle step has no request on any rank, got {list(row)}")
        if len(prompts) != cfg.world_size:
            raise ValueError(f"prompt_lens[{s}]: expected {cfg.world_size} per-rank tuples")
        for r, lens in enumerate(prompts):
            want = row[r] if kind == "prefill" else 0
            if len(lens) != want or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in lens):
                raise ValueError(f"prompt_lens[{s}][{r}]: expected {want} prompt lengths >= 1, got {lens!r}")
    for bs in cfg.capture_bs:
        _validate.positive_int("capture_bs[]", bs)
    if cfg.budget_frac is not None:
        planner.check_budget_frac(cfg.budget_frac)


# ---------------------------------------------------------------- per-rank inputs, keyed by (seed, step, rank)

def prompt_tokens(cfg: StepRunConfig, step: int, rank: int) -> List[List[int]]:
    rng = random.Random(f"prompt:{cfg.seed}:{step}:{rank}")
    return [[rng.randint(1, 50_000) for _ in range(n)] for n in cfg.prompt_lens[step][rank]]


def decode_inputs(cfg: StepRunConfig, step: int, rank: int):
    """(anchors [bs], committed lengths [bs], drafts [bs, gamma], confidence [bs, gamma], target logits [bs, T, V])."""
    bs, g = cfg.batch_sizes[step][rank], cfg.gamma
    gen = torch.Generator().manual_seed((cfg.seed * 1_000_003 + step * 1009 + rank) & 0xFFFFFFFF)
    anchors = torch.randint(0, VOCAB, (bs,), generator=gen)
    lens = torch.randint(1, 64, (bs,), generator=gen)
    drafts = torch.randint(0, VOCAB, (bs, g), generator=gen)
    conf = torch.tensor([0.3, 0.6, 0.9], dtype=torch.float64)[torch.randint(0, 3, (bs, g), generator=gen)]
    logits = torch.randn(bs, g + 1, VOCAB, generator=gen, dtype=torch.float64)
    # The target agrees with a draft prefix of random length, so accept lengths vary.
    agree = torch.randint(0, g + 1, (bs,), generator=gen)
    for i in range(bs):
        for j in range(int(agree[i])):
            logits[i, j, drafts[i, j]] += 10.0
    return anchors, lens, drafts, conf, logits


def _plan_tensor(plan) -> torch.Tensor:
    return torch.tensor([plan.tokens, -1 if plan.graph_tokens is None else plan.graph_tokens, int(plan.wants_microbatch)],
                        dtype=torch.int64)


def _plan_of(t: torch.Tensor):
    tokens, graph, wants = (int(x) for x in t.tolist())
    return dp_padding.RankPlan(tokens, None if graph < 0 else graph, bool(wants))


def _listed(v):
    return None if v is None else [int(x) for x in (v.tolist() if isinstance(v, torch.Tensor) else v)]


class StepRankProgram:
    """One DP rank through every step of a `StepRunConfig`. Subclass and override a method to inject a fault."""

    OPS = OPS

    def __init__(self, rank: int, cfg: StepRunConfig, comm):
        if not isinstance(cfg, StepRunConfig):
            raise TypeError(f"cfg: expected a StepRunConfig, got {type(cfg).__name__}")
        if cfg.world_size != comm.world_size:
            raise ValueError(f"cfg.world_size: {cfg.world_size} ranks configured, {comm.world_size} running")
        self.rank, self.cfg, self.comm = rank, cfg, comm
        self.device = comm.device
        self.T = cfg.gamma + 1
        self.mode, self.run_step = cfg.verify_modes[0], 0  # set by each step

    def make_proposer(self):
        return dspark_draft.DraftBlockProposer(self.cfg.gamma, sample_from_anchor=self.cfg.sample_from_anchor, draft_is_moe=True,
                                  attn_dp_enabled=True, enable_num_token_non_padded=True, device=self.device)

    def graph_sizes(self) -> List[int]:
        return graph_buckets.capture_num_tokens(self.cfg.capture_bs, self.T) if self.cfg.capture_bs else []

    # -- the step's first forward
    def local_batch(self, step: int):
        kind, bs = self.cfg.kinds[step], self.cfg.batch_sizes[step][self.rank]
        pool = schedule_batch.ReqToTokenPool(max(bs, 1), 64 + 2 * self.T + 1)
        if kind == "prefill":
            prompts = prompt_tokens(self.cfg, step, self.rank)
            reqs = [schedule_batch.Req(rid=i, origin_input_ids=p, output_ids=[], req_pool_idx=i, kv_committed_len=0)
                    for i, p in enumerate(prompts)]
            return schedule_batch.ScheduleBatch(reqs=reqs, req_to_token_pool=pool, speculative_num_draft_tokens=self.T,
                                 req_pool_indices=torch.arange(bs, dtype=torch.int64),
                                 seq_lens=torch.tensor([len(p) for p in prompts], dtype=torch.int64))
        anchors, lens, *_ = decode_inputs(self.cfg, step, self.rank)
        reqs = [schedule_batch.Req(rid=i, origin_input_ids=[0] * n, output_ids=[a], req_pool_idx=i, kv_committed_len=n)
                for i, (a, n) in enumerate(zip(anchors.tolist(), lens.tolist()))]
        batch = schedule_batch.ScheduleBatch.prebuilt(reqs, pool, speculative_num_draft_tokens=self.T)
        if kind == "handoff":  # the PD decode side builds the draft input from the handoff
            disaggregation.process_prebuilt(batch, overlap_utils.FutureMap(pool.size))
        else:
            batch.spec_info = draft_input.DraftInput(bonus_tokens=anchors.to(torch.int64), new_seq_lens=batch.seq_lens.clone())
        return batch

    def local_forward_tokens(self, step: int, batch) -> int:
        """What this rank tells the MLP-sync gather: its extend tokens at a prefill, its requests otherwise."""
        if self.cfg.kinds[step] == "prefill":
            return sum(len(r.origin_input_ids) for r in batch.reqs)
        return batch.batch_size()

    def gather_sync(self, step: int, batch) -> Tuple[List[int], List[int]]:
        mine = torch.tensor([self.run_step, batch.batch_size(), self.local_forward_tokens(step, batch)], dtype=torch.int64)
        rows = self.comm.all_gather(self.run_step, "sync", mine)
        if any(int(r[0]) != self.run_step for r in rows):
            raise RuntimeError(f"sync gather at step {self.run_step} paired with peers at steps {[int(r[0]) for r in rows]}")
        return [int(r[1]) for r in rows], [int(r[2]) for r in rows]

    def forward_batch(self, step: int, batch, proposer):
        if self.cfg.kinds[step] == "prefill":
            ids = torch.tensor([t for r in batch.reqs for t in r.origin_input_ids], dtype=torch.int64)
            mode = schedule_batch.ForwardMode.EXTEND if batch.reqs else schedule_batch.ForwardMode.IDLE
            fb = forward_batch_info.ForwardBatch(forward_mode=mode, batch_size=batch.batch_size(), input_ids=ids,
                                                 req_pool_indices=batch.req_pool_indices, seq_lens=batch.seq_lens,
                                                 out_cache_loc=None, seq_lens_sum=int(ids.numel()))
            fb.init_mlp_sync_metadata(batch, self.device)
            return fb
        if batch.batch_size() == 0:
            return proposer.run_idle_participation(batch)
        return proposer.build_draft_forward_batch(batch)

    def forward_rows(self, step: int, fb) -> torch.Tensor:
        """(token, src_rank, req, pos) of every row of the forward: prompt positions, or the draft query slots."""
        if fb.batch_size == 0:
            return torch.zeros((0, len(ROW_FIELDS)), dtype=torch.int64)
        if self.cfg.kinds[step] == "prefill":
            lens = self.cfg.prompt_lens[step][self.rank]
            req = torch.repeat_interleave(torch.arange(len(lens)), torch.tensor(lens))
            pos = torch.cat([torch.arange(n) for n in lens])
        else:
            q = fb.input_ids.numel() // fb.batch_size
            req = torch.arange(fb.batch_size).repeat_interleave(q)
            pos = torch.arange(q).repeat(fb.batch_size)
        ids = fb.input_ids.cpu().to(torch.int64)
        return torch.stack([ids, torch.full_like(ids, self.rank), req, pos], dim=-1)

    def gather_rows(self, step: int, op: str, rows: torch.Tensor, pad: int, counts: List[int]) -> torch.Tensor:
        """All-gather `rows` padded to `pad`, each peer's chunk trimmed to `counts[peer]`."""
        if rows.shape[0] > pad:
            raise RuntimeError(f"{rows.shape[0]} local rows exceed the agreed buffer of {pad} rows")
        buf = torch.full((max(pad, 1), len(ROW_FIELDS)), PAD, dtype=torch.int64)
        buf[: rows.shape[0]] = rows
        chunks = self.comm.all_gather(self.run_step, op, buf)
        return torch.cat([chunk[: counts[r]] for r, chunk in enumerate(chunks)], dim=0)

    # -- the verify
    def verify_lens(self, step: int, bs: int, conf: torch.Tensor) -> Optional[torch.Tensor]:
        """None in static mode (every request verifies T), else the planner's lengths (an idle rank plans too)."""
        if self.mode == "static":
            return None
        frac = self.cfg.budget_frac
        return planner.plan_step(conf, conf, verify_mode=self.mode, force_budget_frac=frac).verify_lens

    def verify_layout(self, step: int, bs: int, lens: Optional[torch.Tensor]):
        """(the real verify rows as strided cells req * T + within, their count): compact packs the planned cells,
        the other modes run every request's T cells."""
        if self.mode == "compact":
            layout = planner.RaggedVerifyLayout.from_lens(lens, self.T)
            return layout.window, layout.total
        cells = torch.arange(bs * self.T)
        return cells, int(cells.numel())

    def agree_verify_rows(self, step: int, real: int):
        gather = lambda plan: [_plan_of(t) for t in self.comm.all_gather(self.run_step, "verify_plan", _plan_tensor(plan))]  # noqa: E731
        plans = []

        def all_gather(plan):
            plans.extend(gather(plan))
            return plans

        padding = dp_padding.coordinate(self.rank, real, self.graph_sizes(), 1, NO_THRESHOLD, all_gather)
        return padding, [p.tokens for p in plans]

    def accept(self, lens, anchors, committed, drafts, logits):
        cand = torch.cat([anchors[:, None], drafts], dim=1)
        if self.mode == "compact":
            layout = planner.RaggedVerifyLayout.from_lens(lens, self.T)
            logits = layout.scatter(logits.reshape(-1, VOCAB)[layout.window], 0.0)  # only the packed rows computed
        acc = verify.greedy_accept(cand, logits, lens, backend="torch")
        return acc, verify.finalize(committed, drafts, acc, backend="torch")

    def step(self, run_step: int, proposer) -> dict:
        """One step the ranks run: step `step` of the case in verify mode `self.mode`."""
        self.run_step = run_step
        self.mode, step = self.cfg.at(run_step)
        kind = self.cfg.kinds[step]
        batch = self.local_batch(step)
        raw, tokens = self.gather_sync(step, batch)
        batch.global_num_tokens = list(tokens)
        batch.global_num_tokens_for_logprob = list(tokens)
        batch.is_extend_in_batch = kind == "prefill"
        fb = self.forward_batch(step, batch, proposer)
        if fb is None:
            raise RuntimeError("the idle rank got no ForwardBatch to join the collectives with")
        counts = _listed(fb.global_num_tokens_cpu)
        local = self.forward_rows(step, fb)
        gathered = self.gather_rows(step, "forward_tokens", local, max(counts, default=0), counts)

        bs = batch.batch_size() if kind in VERIFY_KINDS else 0
        anchors, committed, drafts, conf, logits = decode_inputs(self.cfg, step, self.rank) if bs else \
            (torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64),
             torch.zeros(0, self.cfg.gamma, dtype=torch.int64), torch.zeros(0, self.cfg.gamma, dtype=torch.float64),
             torch.zeros(0, self.T, VOCAB, dtype=torch.float64))
        lens = self.verify_lens(step, bs, conf)
        cells, real = self.verify_layout(step, bs, lens)
        padding, rank_real = self.agree_verify_rows(step, real)
        cand = torch.cat([anchors[:, None], drafts], dim=1).reshape(-1)
        vrows = torch.stack([cand[cells], torch.full_like(cells, self.rank), cells // self.T, cells % self.T], dim=-1) \
            if real else torch.zeros((0, len(ROW_FIELDS)), dtype=torch.int64)
        vgathered = self.gather_rows(step, "verify_tokens", vrows, max(padding.rank_padded_tokens), rank_real)
        acc, fin = self.accept(lens, anchors, committed, drafts, logits)
        return {
            "step": step, "rank": self.rank, "verify_mode": self.mode, "kind": kind, "bs": batch.batch_size(),
            "forward_mode": fb.forward_mode.name,
            "request_counts": list(raw),
            "forward_token_counts": counts,
            "forward_rows": local.tolist(), "forward_gathered": gathered.tolist(),
            "verify_lens": [self.T] * bs if lens is None else _listed(lens),
            "verify_cells": cells.tolist(), "verify_tokens": real, "rank_verify_tokens": list(rank_real),
            "padded_verify_tokens": padding.padded_tokens, "rank_padded_verify_tokens": list(padding.rank_padded_tokens),
            "verify_graph": padding.graph,
            "verify_rows": vrows.tolist(), "verify_gathered": vgathered.tolist(),
            "correct_len": _listed(acc.correct_len), "commit_len": _listed(fin.commit_len),
            "collectives": None,  # filled by run()
        }

    def run(self) -> List[dict]:
        out, proposer = [], None
        for s in range(self.cfg.steps):
            if s % len(self.cfg.kinds) == 0:  # a fresh proposer per verify mode, as a fresh server would hold
                proposer = self.make_proposer()
            before = self.comm.entered
            obs = self.step(s, proposer)
            obs["collectives"] = self.comm.entered - before
            out.append(obs)
        return out
