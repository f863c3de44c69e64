"""Real DP-attention ranks: one process per rank, torch.distributed collectives between them.

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

Every rank reports plain data per step (lists and ints) to the parent. A collective that
does not complete within ``timeout_s`` fails (gloo process-group timeout, backed by a
watchdog in the parent); the parent then stops every rank and raises `RankFailure`
naming the rank at fault. No child outlives `run_dp`.

The program a rank runs is the `RankProgram` class, passed to the children as a class
reference (data), so a subclass defined in an importable module reaches spawned ranks too.

Backends and processes: gloo on the CPU (ranks forked: a spawned rank re-imports torch,
seconds per rank), NCCL with one GPU per rank when there are enough (ranks spawned).
Only loopback is used: the rendezvous store listens on 127.0.0.1 (port chosen by the OS)
in the parent, and gloo is pinned to the loopback interface.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import random
import shutil
import socket
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing import connection as mp_connection
from typing import List, Optional, Sequence, Tuple

import torch

from dspark import _validate
from dspark.spec_info import draft_query_width

OPS = ("counts", "views", "draft_tokens")  # the collectives of one step, in order, on every rank
ROW_FIELDS = ("token", "src_rank", "req", "pos")  # columns of a draft-buffer row
PAD = -1  # padding rows of the gather buffer hold PAD in every column

DEFAULT_TIMEOUT_S = 30.0  # per collective; read at call time
DEFAULT_STARTUP_TIMEOUT_S = 60.0

# Progress board: a few int64 slots per rank, written by the rank, read by the parent. _POS packs
# (collectives entered, canonical index of the last one) into one word, so one read sees both.
_STATE, _POS, _COMPLETED = range(3)
_SLOTS = 3
_SHIFT = 32
STARTING, RUNNING, IN_COLLECTIVE, DONE, FAILED = range(5)
_STATE_NAMES = ("starting", "running", "in a collective", "done", "failed")


class RankFailure(RuntimeError):
    """A DP run that did not complete: `rank` is the rank at fault, `kind` says how.

    kind: "desync" (a rank skipped or repeated a collective), "died" (exited without
    reporting), "error" (raised outside a collective), "timeout" (a collective or the
    watchdog ran out of time), "startup" (ranks never formed the process group).
    """

    def __init__(self, rank: Optional[int], kind: str, message: str, *, step=None, op=None, ranks=None):
        self.rank, self.kind, self.step, self.op = rank, kind, step, op
        self.ranks = dict(ranks or {})  # rank -> one-line status
        self.tracebacks: dict = {}  # rank -> the traceback a failing rank reported
        super().__init__(message)


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
    timeout_s: Optional[float] = None  # None: DEFAULT_TIMEOUT_S at call time
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S
    payload: Optional[tuple] = None  # plain data for a rank program other than RankProgram (picklable)

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
    if cfg.timeout_s is not None and not cfg.timeout_s > 0:
        raise ValueError(f"timeout_s: must be > 0, got {cfg.timeout_s}")
    if not cfg.startup_timeout_s > 0:
        raise ValueError(f"startup_timeout_s: must be > 0, got {cfg.startup_timeout_s}")


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

class Collectives:
    """The rank's only door to its peers: every collective is counted on the progress board."""

    def __init__(self, rank: int, world_size: int, board, device: torch.device):
        self.rank, self.world_size, self.board, self.device = rank, world_size, board, device
        self._base = rank * _SLOTS

    def _set(self, slot: int, value: int) -> None:
        self.board[self._base + slot] = value

    @property
    def entered(self) -> int:
        return self.board[self._base + _POS] >> _SHIFT

    def all_gather(self, step: int, op: str, tensor: torch.Tensor) -> List[torch.Tensor]:
        import torch.distributed as dist

        entered = self.entered + 1
        self._set(_POS, (entered << _SHIFT) | (step * len(OPS) + OPS.index(op)))
        self._set(_STATE, IN_COLLECTIVE)
        tensor = tensor.to(self.device).contiguous()
        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(out, tensor)
        self._set(_COMPLETED, self.board[self._base + _COMPLETED] + 1)
        self._set(_STATE, RUNNING)
        return [t.cpu() for t in out]


class RankProgram:
    """What one DP rank does each step. Subclass and override a method to inject a fault."""

    def __init__(self, rank: int, cfg: DpRunConfig, comm: Collectives):
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


# ---------------------------------------------------------------- process plumbing

@dataclass(frozen=True)
class _Launch:
    cfg: DpRunConfig
    backend: str
    timeout_s: float
    loopback: Optional[str]
    log_dir: str  # each rank's stderr goes to rank<r>.stderr here, quoted when the rank dies


@dataclass
class DpRunResult:
    observations: List[List[dict]]  # [rank][step]
    backend: str
    start_method: str
    wall_s: float
    world_size: int = field(init=False)

    def __post_init__(self):
        self.world_size = len(self.observations)


def _loopback_ifname() -> Optional[str]:
    try:
        for _, name in socket.if_nameindex():
            if name == "lo" or name.startswith("lo"):
                return name
    except OSError:
        pass
    return None


def _die_with_parent() -> None:
    """Linux: SIGKILL this rank if the parent dies, so a killed test run leaves no rank behind."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass


@dataclass(frozen=True)
class _ProgramRef:
    """A rank program class as data: module, qualname and the directory its top package lives in.

    A spawned rank imports the module afresh. A module that is importable in the parent only
    because the caller's working directory is on sys.path (``python -m pytest``), or because
    pytest imported it by path (``--import-mode=importlib``), is found through ``root``.
    """

    module: str
    qualname: str
    root: Optional[str]

    @classmethod
    def of(cls, program) -> "_ProgramRef":
        module = sys.modules.get(program.__module__)
        path = getattr(module, "__file__", None)
        root = None
        if path:
            root = os.path.dirname(os.path.abspath(path))
            for _ in range(program.__module__.count(".") + (os.path.basename(path) == "__init__.py")):
                root = os.path.dirname(root)
        return cls(program.__module__, program.__qualname__, root)

    def resolve(self):
        import importlib

        try:
            module = importlib.import_module(self.module)
        except ModuleNotFoundError:
            if self.root is None or self.root in sys.path:
                raise
            sys.path.insert(0, self.root)
            module = importlib.import_module(self.module)
        obj = module
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        return obj


def _rank_main(rank: int, launch: _Launch, program_ref: _ProgramRef, board, conn, release) -> None:
    """Entry point of a rank process. Reports ("ok", obs) or ("error", ...) through `conn`."""
    base = rank * _SLOTS
    try:
        _die_with_parent()
        faulthandler.disable()  # a forked rank inherits the parent's handler, which would dump the parent's stack
        log = os.open(os.path.join(launch.log_dir, f"rank{rank}.stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 2)  # C++ aborts (gloo) write here; the parent quotes the tail if this rank dies
        os.close(log)
        torch.set_num_threads(1)
        if launch.backend == "gloo" and launch.loopback:
            os.environ["GLOO_SOCKET_IFNAME"] = launch.loopback  # loopback only
        if not conn.poll(launch.cfg.startup_timeout_s):
            raise TimeoutError("no rendezvous address from the parent")
        host, port = conn.recv()
        import torch.distributed as dist

        store = dist.TCPStore(host, port, None, False, timeout=timedelta(seconds=launch.cfg.startup_timeout_s))
        device = torch.device("cpu")
        if launch.backend == "nccl":
            device = torch.device("cuda", rank % torch.cuda.device_count())
            torch.cuda.set_device(device)
        dist.init_process_group(launch.backend, store=store, rank=rank, world_size=launch.cfg.world_size,
                                timeout=timedelta(seconds=launch.timeout_s))
        board[base + _STATE] = RUNNING
        program = program_ref.resolve()(rank, launch.cfg, Collectives(rank, launch.cfg.world_size, board, device))
        obs = program.run()
        board[base + _STATE] = DONE
        conn.send(("ok", obs))
        # Stay connected until every peer is done: an early exit would turn a peer's
        # timeout into a "connection closed" error and blur who is at fault.
        release.wait(launch.cfg.startup_timeout_s + launch.timeout_s * (len(OPS) * launch.cfg.steps + 1))
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
        in_collective = board[base + _STATE] == IN_COLLECTIVE
        board[base + _STATE] = FAILED
        try:
            conn.send(("error", {"type": type(e).__name__, "message": str(e).strip().splitlines()[0] if str(e).strip() else "",
                                 "in_collective": in_collective, "traceback": traceback.format_exc(limit=6)}))
            conn.close()
        finally:
            os._exit(1)  # skip process-group teardown: peers may be gone


def _board_row(board, rank: int) -> dict:
    b = rank * _SLOTS
    pos = board[b + _POS]
    index = pos & ((1 << _SHIFT) - 1)
    return {"state": board[b + _STATE], "entered": pos >> _SHIFT, "completed": board[b + _COMPLETED],
            "step": index // len(OPS), "op": index % len(OPS), "index": index}


def _position(row: dict) -> int:
    """The number of collectives a rank that follows the program has entered at its last one."""
    return row["index"] + 1 if row["entered"] else 0


def _where(row: dict) -> str:
    if not row["entered"]:
        return "before its first collective"
    where = "in" if row["state"] == IN_COLLECTIVE else "after"
    return f"{where} step {row['step']} collective '{OPS[row['op']]}' (#{row['entered']})"


def _stderr_tail(log_dir: str, rank: int, limit: int = 300) -> str:
    try:
        with open(os.path.join(log_dir, f"rank{rank}.stderr"), errors="replace") as f:
            lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(ln[:limit] for ln in lines[-2:])


def _diagnose(world: int, board, exitcodes: dict, errors: dict, results: dict, timeout_s: float,
              reason: str, log_dir: str) -> RankFailure:
    rows = {r: _board_row(board, r) for r in range(world)}
    status = {}
    for r in range(world):
        row, err = rows[r], errors.get(r)
        if r in results:
            status[r] = "finished"
        elif err is not None:
            where = _where({**row, "state": IN_COLLECTIVE if err["in_collective"] else RUNNING})
            status[r] = f"{err['type']} {where}: {err['message'][:200]}"
        elif exitcodes.get(r) is not None:
            tail = _stderr_tail(log_dir, r)
            status[r] = f"exited with code {exitcodes[r]} {_where(row)} without reporting" + (f" (stderr: {tail})" if tail else "")
        else:
            status[r] = f"{_STATE_NAMES[row['state']]}, {_where(row)}"
    peers = "; ".join(f"rank {r}: {s}" for r, s in status.items())

    def fail(rank, kind, what):
        row = rows[rank]
        return RankFailure(rank, kind, f"DP rank {rank} {what} [{reason}; timeout {timeout_s:g}s] — {peers}",
                           step=row["step"] if row["entered"] else None,
                           op=OPS[row["op"]] if row["entered"] else None, ranks=status)

    # 1. A rank whose collective count does not match its place in the program skipped or repeated one.
    for r in range(world):
        row = rows[r]
        expected = len(OPS) * len(results[r]) if r in results else _position(row)
        if row["entered"] != expected:
            return fail(r, "desync", f"is out of step with the collective sequence: it entered {row['entered']} "
                                     f"collectives but its last one is step {row['step']} collective '{OPS[row['op']]}', "
                                     f"which is collective #{expected} of the "
                                     f"program (a skipped or extra collective)")
    # 2. A rank that died without saying why.
    for r in range(world):
        if r not in errors and r not in results and exitcodes.get(r) not in (None, 0):
            return fail(r, "died", f"died mid-step (exit code {exitcodes[r]}) {_where(rows[r])}")
    # 3. A rank that raised outside a collective.
    for r in range(world):
        if r in errors and not errors[r]["in_collective"]:
            e = errors[r]
            return fail(r, "error", f"raised {e['type']} {_where(rows[r])}: {e['message'][:300]}")
    # 4. A rank behind its peers never reached the collective they wait in.
    live = [r for r in range(world) if r not in results]
    if live:
        ahead = max(rows[r]["entered"] for r in range(world))
        behind = [r for r in live if rows[r]["entered"] < ahead]
        if behind:
            r = min(behind, key=lambda x: (rows[x]["entered"], x))
            return fail(r, "timeout", f"never reached the collective its peers wait in (it is {_where(rows[r])})")
        timed_out = "watchdog" in reason or any("imed out" in e["message"] for e in errors.values())
        if len(live) == 1:
            return fail(live[0], "timeout" if timed_out else "error", f"did not complete {_where(rows[live[0]])}")
        return RankFailure(None, "timeout" if timed_out else "error",
                           f"DP ranks {live} all stalled at the same point, none behind another [{reason}; timeout "
                           f"{timeout_s:g}s] — {peers}", ranks=status)
    return RankFailure(None, "error", f"DP run failed [{reason}] — {peers}", ranks=status)


def _backend(world_size: int) -> str:
    """NCCL when every rank can have a GPU of its own, else gloo on the CPU."""
    import torch.distributed as dist

    if torch.cuda.is_available() and dist.is_nccl_available() and torch.cuda.device_count() >= world_size:
        return "nccl"
    return "gloo"


def _terminate(procs) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 5.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5.0)


def run_dp(cfg: DpRunConfig, *, program=None, start_method: Optional[str] = None,
           backend: Optional[str] = None, watchdog_s: Optional[float] = None) -> DpRunResult:
    """Run `cfg` on `cfg.world_size` rank processes; return each rank's per-step observations.

    `program` (default: this module's `RankProgram`, looked up at call time) reaches the
    children as a class reference. Raises `RankFailure` naming the rank at fault when a
    rank fails, dies, skips a collective or a collective times out. The parent's watchdog
    (default: the collective timeout plus max(2 s, half of it)) catches a hang that no
    collective timeout reports.
    """
    import multiprocessing as mp

    import torch.distributed as dist

    validate_config(cfg)
    program = program if program is not None else globals()["RankProgram"]
    backend = backend or _backend(cfg.world_size)
    if start_method is None:
        start_method = "fork" if backend == "gloo" and "fork" in mp.get_all_start_methods() else "spawn"
    timeout_s = float(cfg.timeout_s if cfg.timeout_s is not None else DEFAULT_TIMEOUT_S)
    ctx = mp.get_context(start_method)
    world = cfg.world_size
    log_dir = tempfile.mkdtemp(prefix="dspark-dp-")
    launch = _Launch(cfg, backend, timeout_s, _loopback_ifname(), log_dir)
    board = ctx.RawArray(ctypes.c_int64, world * _SLOTS)
    release = ctx.Event()
    pipes = [ctx.Pipe(duplex=True) for _ in range(world)]
    procs = [ctx.Process(target=_rank_main, args=(r, launch, _ProgramRef.of(program), board, pipes[r][1], release),
                         name=f"dspark-dp-rank-{r}", daemon=True) for r in range(world)]
    conns = [p[0] for p in pipes]
    t0 = time.monotonic()
    store = None
    results: dict = {}
    errors: dict = {}
    exitcodes: dict = {}
    try:
        for p in procs:
            p.start()
        for _, child_end in pipes:
            child_end.close()
        # The store lives in the parent and is created after the fork, so no child inherits its server thread.
        store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=cfg.startup_timeout_s),
                              wait_for_workers=False)
        for c in conns:
            c.send(("127.0.0.1", store.port))
        failure_reason = None
        last_sig, last_change = None, time.monotonic()
        if watchdog_s is None:
            watchdog_s = timeout_s + max(2.0, 0.5 * timeout_s)
        open_conns = {c: r for r, c in enumerate(conns)}
        while len(results) < world and failure_reason is None:
            ready = mp_connection.wait(list(open_conns) + [p.sentinel for p in procs if p.exitcode is None], timeout=0.05)
            for obj in ready:
                r = open_conns.get(obj)
                if r is None:
                    continue
                try:
                    kind, payload = obj.recv()
                except (EOFError, OSError):
                    del open_conns[obj]
                    continue
                if kind == "ok":
                    results[r] = payload
                else:
                    errors[r] = payload
                del open_conns[obj]
            for r, p in enumerate(procs):
                if p.exitcode is not None and r not in results and r not in errors:
                    # a clean report may still be in the pipe: read it before calling the rank dead
                    c = conns[r]
                    if c in open_conns and c.poll(0):
                        continue
                    exitcodes[r] = p.exitcode
            if errors:
                failure_reason = "a rank failed"
            elif exitcodes:
                failure_reason = "a rank exited"
            else:
                rows = [_board_row(board, r) for r in range(world)]
                now = time.monotonic()
                sig = tuple((x["state"], x["entered"], x["completed"]) for x in rows)
                if sig != last_sig:
                    last_sig, last_change = sig, now
                started = all(x["state"] != STARTING for x in rows)
                if not started and now - t0 > cfg.startup_timeout_s:
                    failure_reason = f"ranks did not start within {cfg.startup_timeout_s:g}s"
                elif started and now - last_change > watchdog_s:
                    failure_reason = f"watchdog: no progress for {watchdog_s:g}s"
        if failure_reason is not None:
            # let the peers' own errors (timeouts, closed connections) arrive to name the culprit
            grace = 0.25 if failure_reason.startswith(("watchdog", "ranks did not start")) else min(1.0, 0.25 + 0.1 * timeout_s)
            grace_end = time.monotonic() + grace
            while time.monotonic() < grace_end and open_conns:
                for obj in mp_connection.wait(list(open_conns), timeout=0.05):
                    r = open_conns.pop(obj)
                    try:
                        kind, payload = obj.recv()
                    except (EOFError, OSError):
                        continue
                    (results if kind == "ok" else errors)[r] = payload
            for r, p in enumerate(procs):
                if p.exitcode is not None and r not in results and r not in errors:
                    exitcodes[r] = p.exitcode
            _terminate(procs)
            failure = _diagnose(world, board, exitcodes, errors, results, timeout_s, failure_reason, log_dir)
            failure.tracebacks = {r: e["traceback"] for r, e in errors.items()}
            if failure_reason.startswith("ranks did not start") and failure.kind == "timeout":
                failure.kind = "startup"
            raise failure
        release.set()
        for p in procs:
            p.join(timeout_s + 5.0)
        return DpRunResult([results[r] for r in range(world)], backend, start_method, time.monotonic() - t0)
    finally:
        _terminate(procs)
        for c in conns:
            c.close()
        del store
        shutil.rmtree(log_dir, ignore_errors=True)


def _main(argv=None) -> int:  # `python -m dspark.dp_runner WORLD STEPS [SEED]`: a quick manual run
    argv = sys.argv[1:] if argv is None else argv
    world, steps = int(argv[0]) if argv else 2, int(argv[1]) if len(argv) > 1 else 3
    seed = int(argv[2]) if len(argv) > 2 else 0
    res = run_dp(seeded_config(seed, world, steps))
    for s in range(steps):
        o = res.observations[0][s]
        print(f"step {s}: raw {o['raw_counts']} scaled {o['global_num_tokens_cpu']} graph_bs {o['graph_bs']} "
              f"verify_tier {o['verify_tier']} gathered_rows {len(o['gathered_rows'])}")
    print(f"{world} ranks x {steps} steps in {res.wall_s:.2f}s ({res.backend}, {res.start_method})")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
