"""A DP-attention rank's program: what one rank of a DP group does each decode step, under SGLang's names.

Each rank holds its own decode batch (an idle rank holds none) and, per step:

1. ``counts``: all-gathers ``[step, bs, local verify tier]``, which gives every rank the
   raw per-rank request counts and the per-rank verify tiers (SGLang's MLP-sync gather);
2. fills the draft ForwardBatch DP metadata with the real `DraftBlockProposer`
   (`build_draft_forward_batch`, or `run_idle_participation` on an idle rank), picks the
   graph batch-size bucket from `original_global_num_tokens_cpu` (`graph_buckets`) and the
   DP verify tier from the gathered tiers (SGLang G5);
3. ``views``: all-gathers every rank's view of the scaled counts, so that all ranks pad
   the token buffer to one size even when a faulty rank disagrees (the disagreement then
   shows in the observations instead of as a shape error inside the collective);
4. ``draft_tokens``: all-gathers its draft rows, padded to that size, and trims every
   peer's chunk to the scaled count it holds for that peer.

Every rank reports plain data per step (lists and ints). This module holds the DSpark side only: the run's
`DpRunConfig`, its per-rank inputs, the tier arithmetic and `RankProgram`. Whoever starts the rank processes
builds ``RankProgram(rank, cfg, comm)`` on each and calls ``run()``; the program talks to its peers only through
``comm``: ``comm.device``, ``comm.entered`` (collectives entered so far) and ``comm.all_gather(step, op, tensor)``
(every rank's tensor, in rank order, on the CPU), with ``op`` one of `OPS`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch

from dspark import _validate
from dspark.spec_info import draft_query_width

OPS = ("counts", "views", "draft_tokens")  # the collectives of one step, in order, on every rank
ROW_FIELDS = ("token", "src_rank", "req", "pos")  # columns of a draft-buffer row
PAD = -1  # padding rows of the gather buffer hold PAD in every column


@dataclass(frozen=True)
class DpRunConfig:
    """One multi-rank run. `batch_sizes[s][r]` is rank r's request count at step s (0 = idle).

    `verify_budgets[s][r]` is rank r's verify-token budget (None = no budget this step);
    omitted, every rank verifies all (budget = bs * gamma).
    """

    world_size: int
    batch_sizes: Tuple[Tuple[int, ...], ...]
    verify_budgets: Optional[Tuple[Tuple[Optional[int], ...], ...]] = None
    gamma: int = 4
    sample_from_anchor: bool = True
    capture_bs: Tuple[int, ...] = (1, 2, 4, 8)
    max_running_requests: int = 8
    mask_token_id: int = 0
    seed: int = 0

    def __post_init__(self):
        validate_config(self)

    @property
    def steps(self) -> int:
        return len(self.batch_sizes)

    @property
    def query_token_num(self) -> int:
        return draft_query_width(self.gamma, self.sample_from_anchor)


def validate_config(cfg: DpRunConfig) -> None:
    if isinstance(cfg.world_size, bool) or not isinstance(cfg.world_size, int):
        raise TypeError(f"world_size: expected int, got {type(cfg.world_size).__name__}")
    if cfg.world_size < 1:
        raise ValueError(f"world_size: must be >= 1, got {cfg.world_size}")
    _validate.positive_int("gamma", cfg.gamma)
    _validate.positive_int("max_running_requests", cfg.max_running_requests)
    if not isinstance(cfg.batch_sizes, (list, tuple)) or not cfg.batch_sizes:
        raise ValueError(f"batch_sizes: expected one per-rank list per step, got {cfg.batch_sizes!r}")
    for s, counts in enumerate(cfg.batch_sizes):
        counts = _validate.count_list(f"batch_sizes[{s}]", counts, length=cfg.world_size)
        if max(counts) > cfg.max_running_requests:
            raise ValueError(f"batch_sizes[{s}]: {max(counts)} requests exceed max_running_requests={cfg.max_running_requests}")
    if cfg.verify_budgets is not None:
        if len(cfg.verify_budgets) != len(cfg.batch_sizes):
            raise ValueError(f"verify_budgets: expected {len(cfg.batch_sizes)} steps, got {len(cfg.verify_budgets)}")
        for s, budgets in enumerate(cfg.verify_budgets):
            if not isinstance(budgets, (list, tuple)) or len(budgets) != cfg.world_size:
                n = len(budgets) if isinstance(budgets, (list, tuple)) else type(budgets).__name__
                raise ValueError(f"verify_budgets[{s}]: expected {cfg.world_size} per-rank entries, got {n}")
            for b in budgets:
                if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 0):
                    raise ValueError(f"verify_budgets[{s}]: entries are None or non-negative ints, got {list(budgets)}")


def seeded_config(seed: int, world_size: int, steps: int, *, max_bs: int = 4, idle_fraction: float = 0.4,
                  **kwargs) -> DpRunConfig:
    """Per-step batches drawn deterministically from `seed`: idle ranks, no-budget ranks included."""
    if isinstance(world_size, int) and world_size < 1:
        raise ValueError(f"world_size: must be >= 1, got {world_size}")
    rng = random.Random(seed)
    gamma = kwargs.get("gamma", 4)
    sizes, budgets = [], []
    for _ in range(steps):
        row = [0 if rng.random() < idle_fraction else rng.randint(1, max_bs) for _ in range(world_size)]
        sizes.append(tuple(row))
        budgets.append(tuple(None if rng.random() < 0.1 else rng.randint(0, bs * gamma) for bs in row))
    kwargs.setdefault("max_running_requests", max(8, max_bs))
    return DpRunConfig(world_size, tuple(sizes), tuple(budgets), seed=seed, **kwargs)


# ---------------------------------------------------------------- tier arithmetic (SGLang G5)

def local_verify_tier_num_tokens(bs: int, budget: Optional[int], tokens_per_req: int, min_verify_len: int = 1) -> int:
    """`min(bs * max(min, 1) + budget, bs * T)`, or -1 for a rank without a budget."""
    if budget is None:
        return -1
    return min(bs * max(min_verify_len, 1) + budget, bs * tokens_per_req)


def dp_global_verify_tier_num_tokens(gathered: Sequence[int]) -> Optional[int]:
    """The verify tier every DP rank uses: the max over ranks; None if any rank has none (< 0) or all are 0."""
    gathered = list(gathered)
    if not gathered or any(t < 0 for t in gathered) or all(t == 0 for t in gathered):
        return None
    return max(gathered)


# ---------------------------------------------------------------- per-rank inputs

def rank_batch_inputs(seed: int, step: int, rank: int, bs: int) -> Tuple[List[int], List[int]]:
    """The anchor (bonus) tokens and committed lengths of rank `rank`'s batch at `step`."""
    rng = random.Random(f"{seed}:{step}:{rank}")
    return [rng.randint(1, 50_000) for _ in range(bs)], [rng.randint(1, 64) for _ in range(bs)]


def expected_local_rows(cfg: DpRunConfig, step: int, rank: int) -> List[List[int]]:
    """The draft rows a rank contributes: per request, the anchor then Q-1 masks."""
    bs = cfg.batch_sizes[step][rank]
    bonus, _ = rank_batch_inputs(cfg.seed, step, rank, bs)
    q = cfg.query_token_num
    return [[bonus[i] if j == 0 else cfg.mask_token_id, rank, i, j] for i in range(bs) for j in range(q)]


def _budget(cfg: DpRunConfig, step: int, rank: int) -> Optional[int]:
    if cfg.verify_budgets is None:
        return cfg.batch_sizes[step][rank] * cfg.gamma
    return cfg.verify_budgets[step][rank]


# ---------------------------------------------------------------- the rank program

class RankProgram:
    """What one DP rank does each step. Subclass and override a method to inject a fault."""

    OPS = OPS

    def __init__(self, rank: int, cfg: DpRunConfig, comm):
        if not isinstance(cfg, DpRunConfig):
            raise TypeError(f"cfg: expected a DpRunConfig, got {type(cfg).__name__}")
        if cfg.world_size != comm.world_size:
            raise ValueError(f"cfg.world_size: {cfg.world_size} ranks configured, {comm.world_size} running")
        self.rank, self.cfg, self.comm = rank, cfg, comm
        self.device = comm.device
        self.buckets = None
        self.proposer = None

    # -- setup
    def make_proposer(self):
        from dspark.dspark_draft import DraftBlockProposer

        return DraftBlockProposer(self.cfg.gamma, mask_token_id=self.cfg.mask_token_id,
                                  sample_from_anchor=self.cfg.sample_from_anchor, draft_is_moe=True,
                                  attn_dp_enabled=True, enable_num_token_non_padded=True, device=self.device)

    def setup(self) -> None:
        from dspark.graph_buckets import normalize_capture_bs

        self.proposer = self.make_proposer()
        self.buckets = normalize_capture_bs(self.cfg.capture_bs, self.cfg.max_running_requests)

    # -- one step
    def local_batch(self, step: int):
        from dspark.draft_input import DraftInput
        from dspark.schedule_batch import Req, ReqToTokenPool, ScheduleBatch

        bs = self.cfg.batch_sizes[step][self.rank]
        bonus, lens = rank_batch_inputs(self.cfg.seed, step, self.rank, bs)
        T = self.cfg.gamma + 1
        pool = ReqToTokenPool(max(self.cfg.max_running_requests, 1), 64 + 2 * T + 1)
        reqs = [Req(rid=i, origin_input_ids=[0] * n, output_ids=[b], req_pool_idx=i, kv_committed_len=n)
                for i, (b, n) in enumerate(zip(bonus, lens))]
        batch = ScheduleBatch.prebuilt(reqs, pool, speculative_num_draft_tokens=T)
        batch.spec_info = DraftInput(bonus_tokens=torch.tensor(bonus, dtype=torch.int64),
                                     new_seq_lens=batch.seq_lens.clone())
        batch.spec_verify_tier_num_tokens = local_verify_tier_num_tokens(bs, _budget(self.cfg, step, self.rank), T)
        return batch

    def gather_counts(self, step: int, batch) -> Tuple[List[int], List[int]]:
        mine = torch.tensor([step, batch.batch_size(), batch.spec_verify_tier_num_tokens], dtype=torch.int64)
        rows = self.comm.all_gather(step, "counts", mine)
        steps = [int(r[0]) for r in rows]
        if any(s != step for s in steps):
            raise RuntimeError(f"counts gather at step {step} paired with peers at steps {steps}")
        return [int(r[1]) for r in rows], [int(r[2]) for r in rows]

    def draft_forward_batch(self, batch):
        if batch.batch_size() == 0:
            return self.proposer.run_idle_participation(batch)
        return self.proposer.build_draft_forward_batch(batch)

    def graph_tier(self, batch, fb) -> Optional[int]:
        from dspark.graph_buckets import graph_batch_size

        return graph_batch_size(batch.batch_size(), self.buckets, fb.original_global_num_tokens_cpu, dp_attention=True)

    def verify_tier(self, gathered_tiers: List[int]) -> Optional[int]:
        return dp_global_verify_tier_num_tokens(gathered_tiers)

    def exchange_views(self, step: int, fb) -> List[List[int]]:
        view = list(fb.global_num_tokens_cpu)
        if len(view) != self.cfg.world_size:
            raise RuntimeError(f"global_num_tokens_cpu has {len(view)} entries for {self.cfg.world_size} ranks")
        return [r.tolist() for r in self.comm.all_gather(step, "views", torch.tensor(view, dtype=torch.int64))]

    def local_rows(self, fb) -> torch.Tensor:
        bs = fb.batch_size
        if bs == 0:
            return torch.zeros((0, len(ROW_FIELDS)), dtype=torch.int64)
        q = fb.input_ids.numel() // bs
        tokens = fb.input_ids.reshape(bs, q).cpu()
        req = torch.arange(bs).unsqueeze(1).expand(bs, q)
        pos = torch.arange(q).unsqueeze(0).expand(bs, q)
        src = torch.full((bs, q), self.rank, dtype=torch.int64)
        return torch.stack([tokens, src, req, pos], dim=-1).reshape(bs * q, len(ROW_FIELDS)).to(torch.int64)

    def gather_draft_tokens(self, step: int, fb, views: List[List[int]]) -> Tuple[torch.Tensor, int]:
        """Pad the local rows to the agreed size, all-gather, trim each peer's chunk to its scaled count."""
        pad = max((max(v) for v in views if v), default=0)
        rows = self.local_rows(fb)
        if rows.shape[0] > pad:
            raise RuntimeError(f"{rows.shape[0]} local draft rows exceed the agreed buffer of {pad} rows")
        buf = torch.full((max(pad, 1), len(ROW_FIELDS)), PAD, dtype=torch.int64)
        buf[: rows.shape[0]] = rows
        chunks = self.comm.all_gather(step, "draft_tokens", buf)
        mine = list(fb.global_num_tokens_cpu)
        gathered = torch.cat([chunk[: mine[r]] for r, chunk in enumerate(chunks)], dim=0)
        return gathered, pad

    def step(self, step: int) -> dict:
        batch = self.local_batch(step)
        raw, tiers = self.gather_counts(step, batch)
        batch.global_num_tokens = list(raw)
        batch.global_num_tokens_for_logprob = list(raw)
        batch.global_spec_verify_tier_num_tokens = list(tiers)
        batch.can_run_decode_cuda_graph = True
        fb = self.draft_forward_batch(batch)
        if fb is None:
            raise RuntimeError("the idle rank got no draft ForwardBatch to join the collectives with")
        graph_tier = self.graph_tier(batch, fb)
        verify_tier = self.verify_tier(tiers)
        views = self.exchange_views(step, fb)
        gathered, pad = self.gather_draft_tokens(step, fb, views)
        listed = lambda v: None if v is None else [int(x) for x in (v.tolist() if isinstance(v, torch.Tensor) else v)]  # noqa: E731
        return {
            "step": step,
            "rank": self.rank,
            "bs": batch.batch_size(),
            "forward_mode": fb.forward_mode.name,
            "raw_counts": list(raw),
            "original_global_num_tokens_cpu": listed(fb.original_global_num_tokens_cpu),
            "global_num_tokens_cpu": listed(fb.global_num_tokens_cpu),
            "global_num_tokens_gpu": listed(fb.global_num_tokens_gpu),
            "global_num_tokens_for_logprob_cpu": listed(fb.global_num_tokens_for_logprob_cpu),
            "num_token_non_padded_cpu": fb.num_token_non_padded_cpu,
            "graph_bs": graph_tier,
            "local_verify_tier": batch.spec_verify_tier_num_tokens,
            "gathered_verify_tiers": list(tiers),
            "verify_tier": verify_tier,
            "views": views,
            "pad_rows": pad,
            "local_rows": self.local_rows(fb).tolist(),
            "gathered_rows": gathered.tolist(),
            "collectives": None,  # filled by run()
        }

    def run(self) -> List[dict]:
        self.setup()
        out = []
        for s in range(self.cfg.steps):
            before = self.comm.entered
            obs = self.step(s)
            obs["collectives"] = self.comm.entered - before
            out.append(obs)
        return out
