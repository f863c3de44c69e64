"""The `step` level on SGLang: its real Scheduler and DSparkWorkerV2, driven one scheduler iteration at a time.

What runs is SGLang's own code where its scheduler runs it: requests enter through
`Scheduler.process_input_requests` (a `TokenizedGenerateReqInput`, its `SamplingParams` normalized and verified as
the TokenizerManager does), and every iteration calls the scheduler's own per-iteration functions in the order
`event_loop_normal` / `event_loop_overlap` call them: `ingest_requests`, `get_next_batch_to_run` (prefill
admission, merging the prefill into the running batch, `prepare_for_decode`, finished-row release),
`run_batch` (TpModelWorker + `DSparkWorkerV2.forward_batch_generation`: draft, verify, accept, KV commit, the
FutureMap relay under overlap), `launch_batch_sample_if_needed`, `process_batch_result` (tokens committed to
`Req.output_ids`, finish checks, KV and row release). Aborts go through `Scheduler.abort_request(AbortReq)`.

The models are weights-free checkpoints (`load_format="dummy"`) whose weights are then overwritten so that
both are exact functions of the last token, derived from `EngineSpec.model_seed`, `vocab_size` and `drafter`:
* target: SGLang's stock Llama (3 layers, hidden = vocab = 64); attention and MLP outputs are zeroed, the
  embedding is the identity, so the final norm sees e_t and the logits are s * W[:, t] (s = RMSNorm's scale of a
  one-hot, W the LM head). Rows v >= vocab_size get logit -1e4, so those tokens have probability exactly 0;
  column t's argmax is unique (a 0.8-logit margin). `target_next_logits` is that formula: the exact oracle.
* drafter: SGLang's stock DSparkDraftModel (markov head "vanilla", rank 64) with its layers zeroed (base logits
  exactly 0) and the Markov head's bias table D: draft logits after token p are D[:, p], greedy draft G[p]. The
  drafter name picks how often G agrees with the target's greedy successor: oracle 1, gated 0.8, vanilla 0.6,
  rnn 0.4, random 0 (a uniform table). SGLang's own markov head types are not switched (one head type per
  checkpoint).

Step semantics. The contracts' engine is quiescent between calls: `add_requests("local")` returns once the new
requests are prefilled (their first token sampled); `step` is one decode batch, launched and processed. Without
overlap that is exactly `event_loop_normal`'s iteration. With overlap the iteration is `event_loop_overlap`'s
(launch, then the result queued), and the queued result is processed before `step` returns (what the loop does
when nothing else is launched): the FutureMap relay, the future indices and the overlap paths of the worker all
run, but the next batch is never launched before the previous one's result is processed (CPU/GPU concurrency
is not exercised; the reference engine's model of overlap is the same).

An abort (`AbortReq`) leaves the request in SGLang's running batch for one more forward, by design ("Abort
method 3"); the contracts' abort is immediate, so its row is left out of the next StepView and its output is
what it had when aborted (the tokens that extra forward appends to `output_ids`, past max_new_tokens even, go
back to the client as an abort and are not held to anything here).

Limits, as capabilities the pack does not declare (the contracts then send no such input; anything else
raises NotImplementedError naming the capability, so an unsupported input fails loudly instead of passing):
* `step.ragged` without `step.ragged-laws`: the cap-accept and compact modes run (the torch_native backend reads a
  ragged layout through worker_env substitution 7, unpadded layouts only) in the decode loop; DIST-001, DIST-002 and
  REQ-003 (thousands of requests through a real Scheduler per configuration) and the whole-request contracts stay
  static (no step.ragged-laws, no request.ragged). A ragged Scheduler is built per
  (gamma, overlap, sample_from_anchor, mode, SPS table); the newest RAGGED_SLOTS stay cached.
* no `step.pd-handoff` here: a Scheduler in the normal mode prefills locally. PD handoff is engine `sglang-pd`
  (contracts.adapters.sglang.pd_step: a decode-mode Scheduler every request joins through).
* no `step.overlap-toggle`: SGLang fixes overlap scheduling when the Scheduler is built; `set_overlap`
  accepts only the current value.
* no `step.seeded-sampling`: SGLang's default sampling draws from one generator and a per-batch counter, so a
  sampled request's tokens depend on its batch companions (its deterministic-inference mode is not used here).
* capture_bs, sps, force_budget_frac and min_verify_len only matter in ragged modes (CUDA graphs do not run on
  CPU); pool_size <= MAX_RUNNING, max_context_len <= CONTEXT_LEN. `sample_from_anchor` is the draft
  checkpoint's own config field (SGLang reads it from the draft's config.json).

Whole-request parameters (`request.*`): every RequestSpec field goes through SGLang's own `SamplingParams`, its
`normalize` and `verify(vocab)` (`sampling_fields`, `_tokenized`), so a request SGLang's admission refuses raises
instead of running. The scheduler holds a stand-in tokenizer (`StandInTokenizer`, what it can hide is in its
docstring): SGLang refuses min_new_tokens without one. `param_states` (`request.state`) reads the penalizers of the
scheduler's running batch, the state the next decode's forward copy is made from.

SGLang's scheduler watchdog (it SIGQUITs the parent process when no batch progresses for `watchdog_timeout`) is set
to a day: the cached Scheduler sits idle between contracts; hides: a hang SGLang's own watchdog would have caught
(a contract's step loop still bounds every run).

Caching: one Scheduler per (gamma, overlap, sample_from_anchor), built on first use and reused; an engine with
non-default SGLANG_DSPARK_* options (`options`) gets a Scheduler of its own instead, never reused. A new engine on a cached Scheduler
first aborts every request of the previous one, runs the scheduler until they are released, and checks that the
request rows and KV slots are all free again (a leak is an error, not a reset).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import zlib
from array import array
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

import torch

from contracts import heap
from contracts.adapters.sglang import env as sglang_env
from contracts.adapters.sglang.ranks import SGLangTpProgram
from contracts.boundary.engine import DraftDraws, EngineSpec, RequestView, StepLaws, StepView
from contracts.launcher import start_forkserver
from contracts.patching import patched

MODEL_VOCAB = 64  # = hidden size: the target's embedding is the identity
MASK_ID = MODEL_VOCAB - 1
MAX_RUNNING = 1024  # DIST-001 admits 1,000 requests at once
CONTEXT_LEN = 256
KV_SLOTS = 32768
FORBIDDEN = -1e4  # logit of tokens outside the spec's vocabulary: probability exactly 0 (float32 and float64)
AGREEMENT = {"oracle": 1.0, "gated": 0.8, "vanilla": 0.6, "rnn": 0.4, "random": None}
TIMINGS: dict = {"import": 0.0, "build": 0.0, "builds": 0, "reset": 0.0}  # seconds, for the report


# ---- requests ------------------------------------------------------------------------------------------------------


class StandInTokenizer:
    """The narrowest tokenizer SGLang's request path reads on a server without text (`skip_tokenizer_init`): no EOS
    id and no additional stop ids of its own (`Req._check_token_based_finish`, the min_new_tokens penalizer's stop
    set). SGLang refuses min_new_tokens > 0 without a tokenizer (`raise_if_tokenizer_required`; the penalizer reads
    `req.tokenizer.additional_stop_token_ids`), so the step level's scheduler holds this one, and `normalize` is
    handed it as the TokenizerManager hands its own. Hides: a real tokenizer's own EOS and additional stop ids (they
    join the stop set and the min_new_tokens mask in SGLang; here the request's stop ids are the whole set), and the
    text paths (stop strings, detokenization), which raise here instead of running."""

    eos_token_id = None
    additional_stop_token_ids = None

    def encode(self, *args, **kwargs):
        raise NotImplementedError("the step level's stand-in tokenizer has no text (no stop strings)")

    decode = encode

    def __repr__(self):
        return "StandInTokenizer()"


STAND_IN_TOKENIZER = StandInTokenizer()


def sampling_fields(r, *, prefill_only: bool = False) -> dict:
    """SamplingParams' fields for a RequestSpec (SGLang's API names: `logit_bias` keyed by token id strings, the EOS id
    among the stop token ids, top-k -1 for off)."""
    stops = set(r.stop_token_ids) | ({r.eos_id} if r.eos_id is not None else set())
    return dict(max_new_tokens=r.max_new_tokens + (1 if prefill_only else 0), temperature=r.temperature,
                top_k=r.top_k if r.top_k > 0 else -1, top_p=r.top_p, min_p=r.min_p,
                frequency_penalty=r.frequency_penalty, presence_penalty=r.presence_penalty,
                repetition_penalty=r.repetition_penalty, min_new_tokens=r.min_new_tokens,
                logit_bias={str(t): float(b) for t, b in r.logit_bias} or None,
                stop_token_ids=sorted(stops) or None, ignore_eos=bool(r.ignore_eos or prefill_only))


# ---- models ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Models:
    vocab: int
    lm_head: torch.Tensor  # [V, V] float32: logits after token t = scale * lm_head[:, t]
    draft_bias: torch.Tensor  # [V, V] float32: draft logits after token p = draft_bias[:, p]
    greedy: tuple  # the target's greedy successor of each token
    draft_greedy: tuple  # the drafter's greedy successor of each token


@lru_cache(maxsize=64)
def models(vocab_size: int, model_seed: int, drafter: str) -> Models:
    if drafter not in AGREEMENT:
        raise ValueError(f"drafter: expected one of {sorted(AGREEMENT)}, got {drafter!r}")
    if not 2 <= vocab_size < MASK_ID:
        raise ValueError(f"vocab_size: expected 2..{MASK_ID - 1} (the model's vocabulary is {MODEL_VOCAB}), got {vocab_size}")
    V, n = MODEL_VOCAB, vocab_size
    gen = torch.Generator().manual_seed(10007 * model_seed + 31 * vocab_size + 1)
    F = torch.randint(0, n, (V,), generator=gen)
    W = torch.full((V, V), FORBIDDEN / 8.0)
    W[:n] = torch.rand(n, V, generator=gen) * 0.25
    W[F, torch.arange(V)] = 0.35  # the unique argmax: 0.1 above any other live row, 0.8 logits after the norm
    agree = AGREEMENT[drafter]
    # crc32, not hash(): a str's hash changes with the process's hash seed, and with it the drafter every run drew.
    dgen = torch.Generator().manual_seed(10007 * model_seed + 31 * vocab_size + 2 + zlib.crc32(drafter.encode()) % 9973)
    other = torch.randint(0, n, (V,), generator=dgen)
    if agree is None:
        G = other
    else:
        G = torch.where(torch.rand(V, generator=dgen) < agree, F, other)
    D = torch.full((V, V), FORBIDDEN)
    D[:n] = torch.rand(n, V, generator=dgen) * 2.0
    D[G, torch.arange(V)] = 4.0
    return Models(n, W.float(), D.float(), tuple(F.tolist()), tuple(G.tolist()))


def _rms_scale(eps: float) -> float:
    """RMSNorm of a one-hot row of width MODEL_VOCAB (norm weight 1), in float32."""
    x = torch.zeros(MODEL_VOCAB, dtype=torch.float32)
    x[0] = 1.0
    return float(torch.rsqrt(x.pow(2).mean() + eps))


# ---- checkpoints --------------------------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def _checkpoint_dir() -> str:
    return sglang_env.scratch_dir("dspark-contracts-sglang-step-")


def _target_dir() -> str:
    d = os.path.join(_checkpoint_dir(), "target")
    if not os.path.exists(d):
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=MODEL_VOCAB,
                           hidden_size=MODEL_VOCAB, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                           num_key_value_heads=4, head_dim=16, max_position_embeddings=2 * CONTEXT_LEN,
                           torch_dtype="float32", tie_word_embeddings=False, rms_norm_eps=1e-6,
                           # Llama's default EOS is token 2: the mask id has probability 0, so only a request's own
                           # stop token ends it early
                           eos_token_id=MASK_ID, bos_token_id=MASK_ID), f)
    return d


def _draft_dir(gamma: int, sample_from_anchor: bool) -> str:
    d = os.path.join(_checkpoint_dir(), f"draft-{gamma}-{int(sample_from_anchor)}")
    if not os.path.exists(d):
        os.makedirs(d)
        dflash = dict(target_layer_ids=[0, 1], mask_token_id=MASK_ID, markov_rank=MODEL_VOCAB, markov_head_type="vanilla")
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(dict(architectures=["DSparkDraftModel"], model_type="qwen3", vocab_size=MODEL_VOCAB,
                           hidden_size=MODEL_VOCAB, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                           num_key_value_heads=4, head_dim=16, max_position_embeddings=2 * CONTEXT_LEN,
                           torch_dtype="float32", rms_norm_eps=1e-6, block_size=gamma, dflash_config=dflash,
                           num_target_layers=3, enable_confidence_head=True, markov_rank=MODEL_VOCAB,
                           markov_head_type="vanilla", mask_token_id=MASK_ID, eos_token_id=MASK_ID,
                           sample_from_anchor=sample_from_anchor,
                           bos_token_id=MASK_ID), f)
    return d


# ---- one cached Scheduler ---------------------------------------------------------------------------------------------


class _Slot:
    """A Scheduler of one (gamma, overlap, sample_from_anchor, verify mode, SPS table), its runtime context and the
    sockets its outputs drain into."""

    def __init__(self, gamma: int, overlap: bool, sample_from_anchor: bool, *, options=None, mode: str = "static",
                 sps_path: Optional[str] = None, **server_args):
        from contracts.adapters.sglang.env import prepare_sglang_import

        t = time.perf_counter()
        prepare_sglang_import()
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.server_args import PortArgs, ServerArgs

        from contracts.adapters.sglang.runtime import runtime
        from contracts.adapters.sglang.worker_env import create_scheduler_context, scheduler_construction, scheduler_env

        runtime()  # the pack's process config first: the scheduler's context never replaces it
        TIMINGS["import"] += time.perf_counter() - t
        t = time.perf_counter()
        self.gamma, self.overlap = gamma, overlap
        # An engine's SGLANG_DSPARK_* settings (contracts.adapters.sglang.options), applied while SGLang builds the
        # worker (its observers read them there) and around every call (some are read at each step).
        self.options = options
        # SGLang's verify mode is its SGLANG_RAGGED_VERIFY_MODE setting, read when the worker builds its planner (and
        # the draft model its confidence head) and at some steps: applied like the options, at build and every call.
        self.mode = mode
        self.server_args = ServerArgs(
            model_path=_target_dir(), speculative_algorithm="DSPARK", speculative_draft_model_path=_draft_dir(gamma, sample_from_anchor),
            device="cpu", load_format="dummy", skip_tokenizer_init=True, disable_cuda_graph=True,
            attention_backend="torch_native", page_size=1, speculative_num_draft_tokens=gamma + 1,
            max_total_tokens=KV_SLOTS, max_running_requests=MAX_RUNNING, context_length=CONTEXT_LEN, dtype="float32",
            disable_radix_cache=True, disable_overlap_schedule=not overlap, speculative_dspark_sps_table_path=sps_path,
            # The scheduler's watchdog SIGQUITs this process's PARENT when no batch progresses for watchdog_timeout
            # (300 s): a Scheduler left idle between contracts, or one slowed by coverage, killed `check`'s caller.
            # A day is never reached by a contract; an engine hang still shows as the contract's own timeout.
            watchdog_timeout=86400.0, soft_watchdog_timeout=None,
            # With options on, the passive read-outs run every step: the decode log line (the block-accept estimate's
            # suffix among it) and the server-info poll (`iterate`), as an operator watching a live server sees them.
            # And the options' own server arguments (options.SERVER_ARG_OPTIONS), such as the STS calibration path.
            **({"decode_log_interval": 1, **options.server_args} if options is not None else {}), **server_args)
        self.context = create_scheduler_context(self.server_args)
        with self._options_applied(), scheduler_env(self.context), scheduler_construction():
            self.port_args = PortArgs.init_new(self.server_args)
            self.scheduler = Scheduler(self.server_args, self.port_args)
        # Built without one (skip_tokenizer_init): the stand-in is what each new Req is handed (min_new_tokens).
        self.scheduler.tokenizer = STAND_IN_TOKENIZER
        self._sinks()
        self._loop_state()
        self._target_table = None
        TIMINGS["build"] += time.perf_counter() - t
        TIMINGS["builds"] += 1
        self.owner = None  # the handle currently using this Scheduler

    @contextlib.contextmanager
    def _options_applied(self):
        from contracts.adapters.sglang.options import settings_applied

        with settings_applied({"SGLANG_RAGGED_VERIFY_MODE": self.mode}):
            if self.options is None:
                yield
            else:
                with self.options.applied():
                    yield

    def close(self):
        """Close the sockets the outputs drain into (a Scheduler with options is built for one engine)."""
        for sock in self._pulls:
            sock.close(linger=0)
        self._pulls = []

    def _sinks(self):
        """PULL sockets on the scheduler's output addresses: its real send path runs, the messages are dropped."""
        import zmq

        self._zmq = zmq.Context()
        self._pulls = []
        for name in (self.port_args.detokenizer_ipc_name, self.port_args.tokenizer_ipc_name):
            sock = self._zmq.socket(zmq.PULL)
            sock.bind(name)
            self._pulls.append(sock)

    def drain(self):
        import zmq

        for sock in self._pulls:
            while True:
                try:
                    sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break

    def _loop_state(self):
        """What `run_event_loop` and the loop functions set before their first iteration."""
        s = self.scheduler
        s.schedule_stream.synchronize = lambda: None  # run_event_loop: "No-op for CPU"
        s._war_barrier_enabled = False  # run_event_loop: is_cuda() or SGLANG_ENABLE_WAR_BARRIER (off by default)
        s.enable_continuous_input_polling = False  # _dispatch_event_loop_once
        s.enable_skip_finishing_decode = self.overlap  # event_loop_overlap sets it, _dispatch_event_loop_once clears it
        s.result_queue = deque()
        s.metrics_reporter.start_scheduler_time_accounting()

    @contextlib.contextmanager
    def env(self):
        from contracts.adapters.sglang.worker_env import scheduler_env

        s = self.scheduler
        with self._options_applied(), scheduler_env(self.context), torch.inference_mode(), \
                s.device_module.StreamContext(s.schedule_stream):
            yield
        self.drain()

    # ---- one iteration, as the event loops run it ----------------------------------------------------------

    def iterate(self):
        """One iteration of event_loop_normal / event_loop_overlap; returns the batch it ran (None when idle). Under
        overlap the queued result is processed before returning (see the module docstring). With options on, then
        the server-info poll (`get_internal_state`, what /server_info sends; its DSpark part is the info dumper's
        record): a passive read-out between steps must change no output either (OPT-001)."""
        batch = self._iterate()
        if self.options is not None:
            from sglang.srt.managers.io_struct import GetInternalStateReq

            self.scheduler.get_internal_state(GetInternalStateReq())
        return batch

    def _iterate(self):
        s = self.scheduler
        s.ingest_requests()
        plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
        s.running_batch = plan.running_batch
        batch = plan.batch_to_run
        s.cur_batch_for_debug = batch
        if not self.overlap:
            if batch:
                result = s.run_batch(batch)
                s.process_batch_result(batch, result)
            else:
                s._sched_idled = True
                s.on_idle()
            s.last_batch = batch
            return batch
        if batch:
            result = s.run_batch(batch)
            s._apply_war_barrier()
            s.result_queue.append((batch.copy(), result))
        else:
            result = None
            s._sched_idled = True
            s.on_idle()
        s.launch_batch_sample_if_needed(result, batch)
        while s.result_queue:  # the loop's pop_and_process, before anything else is launched
            self._pop_and_process()
        s.last_batch = batch
        return batch

    def _pop_and_process(self):
        s = self.scheduler
        done, done_result = s.result_queue.popleft()
        s.process_batch_result(done, done_result)

    def busy(self) -> bool:
        s = self.scheduler
        return bool(s.waiting_queue) or not s.running_batch.is_empty() or s.last_batch is not None

    def free_check(self):
        s = self.scheduler
        rows, total_rows = s.req_to_token_pool.available_size(), s.req_to_token_pool.size
        slots, total_slots = s.token_to_kv_pool_allocator.available_size(), s.max_total_num_tokens
        if rows != total_rows or slots != total_slots:
            raise RuntimeError(f"SGLang scheduler reset: {total_rows - rows} request rows and {total_slots - slots} KV "
                               "slots still held after every request finished or was aborted (a leak)")

    def reset(self):
        """Abort everything the previous engine left, run until the scheduler is idle, check the pools are free."""
        from sglang.srt.managers.io_struct import AbortReq

        t = time.perf_counter()
        with self.env():
            if self.busy():
                self.scheduler.abort_request(AbortReq(abort_all=True))
                for _ in range(8):
                    if not self.busy():
                        break
                    self.iterate()
            if self.busy():
                raise RuntimeError("SGLang scheduler reset: still busy 8 iterations after aborting every request")
            self.free_check()
        TIMINGS["reset"] += time.perf_counter() - t

    def force_budget_frac(self, frac: Optional[float]):
        """The forced verify-budget fraction (None: the planner's own budget) through the scheduler's entry point
        for it, `set_internal_state(dspark_force_budget_frac)` (what the SPS profiler's --fracs sweep sends); SGLang's
        validation refuses a fraction outside (0, 1]."""
        from sglang.srt.managers.io_struct import SetInternalStateReq

        with self.env():
            out = self.scheduler.set_internal_state(SetInternalStateReq(server_args={"dspark_force_budget_frac": frac}))
        if not out.updated:
            raise ValueError(f"force_budget_frac: SGLang refused {frac!r} (dspark_force_budget_frac must be in (0, 1])")

    def reseed(self, seed: int):
        """SGLang's randomness as a Scheduler built with `--random-seed seed` starts it: the draft noise (a Philox
        key from the seed and a counter each block advances) restarts, and the target sampler's torch generator
        (the CPU sampler draws from torch's default generator) is seeded."""
        from sglang.srt.speculative.dspark_components.dspark_draft import DraftNoise, draft_noise_key

        proposer = self.scheduler.draft_worker._proposer
        proposer._noise = DraftNoise(key=draft_noise_key(seed), offset=torch.zeros_like(proposer._noise.offset))
        torch.manual_seed(seed)

    # ---- weights ----------------------------------------------------------------------------------------------

    def load(self, m: Models):
        s = self.scheduler
        tm = s.tp_worker.model_runner.model
        dm = s.draft_worker.draft_model
        with torch.no_grad():
            tm.model.embed_tokens.weight.copy_(torch.eye(MODEL_VOCAB))
            for layer in tm.model.layers:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
            tm.model.norm.weight.fill_(1.0)
            tm.lm_head.weight.copy_(m.lm_head)
            for layer in dm.layers:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
            dm.norm.weight.zero_()  # base logits exactly 0
            dm.markov_head.markov_w1.weight.copy_(torch.eye(MODEL_VOCAB))
            dm.markov_head.markov_w2.weight.copy_(m.draft_bias)
            if dm.confidence_head is not None:
                g = torch.Generator().manual_seed(7)
                w = dm.confidence_head.proj.weight
                w.copy_(torch.randn(w.shape, generator=g) * 0.1)
        self.scale = _rms_scale(tm.model.norm.variance_epsilon)
        self._target_table = None

    def target_value_table(self) -> torch.Tensor:
        """Layer 0's value vector of every token (what the target's KV cache holds for it), [V, heads*head_dim]."""
        if self._target_table is None:
            layer = self.scheduler.tp_worker.model_runner.model.model.layers[0]
            attn = layer.self_attn
            with torch.no_grad():
                h = layer.input_layernorm(torch.eye(MODEL_VOCAB))
                qkv, _ = attn.qkv_proj(h)
                _, _, v = qkv.split([attn.q_size, attn.kv_size, attn.kv_size], dim=-1)
            self._target_table = v.float()
        return self._target_table

    def row_slots(self, req, length: int) -> torch.Tensor:
        """The KV slots of the request's first `length` positions (its request-to-token row)."""
        return self.scheduler.req_to_token_pool.req_to_token[req.kv.req_pool_idx, :length].to(torch.int64)

    def cache_tokens(self, req, length: int) -> list:
        """The tokens the target's KV cache holds in the request's first `length` slots, decoded from layer 0's V."""
        s = self.scheduler
        slots = self.row_slots(req, length)
        pool = s.tp_worker.model_runner.token_to_kv_pool
        v = pool.get_value_buffer(0)[slots].reshape(length, -1).float()
        dist = torch.cdist(v, self.target_value_table())
        return dist.argmin(dim=1).tolist()


_SLOTS: dict = {}


def cached_slot(key, build, *, for_session: bool = True) -> _Slot:
    """The Scheduler cached under `key`, built by `build()` on first use."""
    if key not in _SLOTS:
        _SLOTS[key] = build()
        if for_session:  # it lives for the session: later gc.collect() passes skip it (never one that may be closed)
            heap.settle()
        # This process now holds the Scheduler's process group, so ranks fork from a forkserver: start it now, and
        # its SGLang import runs on the other core while the contracts go on.
        start_forkserver(SGLangTpProgram)
    return _SLOTS[key]


# Ragged Schedulers are keyed by their SPS table too (SGLang loads it when it builds the planner), and the strategies
# draw many: the newest few stay cached, an older one is closed (its handle then refuses further calls).
RAGGED_SLOTS = 4
_RAGGED_ORDER: list = []


def _slot(gamma: int, overlap: bool, sample_from_anchor: bool, mode: str = "static", sps=None) -> _Slot:
    key = (gamma, overlap, sample_from_anchor) + ((mode, sps) if mode != "static" else ())
    if mode != "static":
        if key in _RAGGED_ORDER:
            _RAGGED_ORDER.remove(key)
        _RAGGED_ORDER.append(key)
        while len(_RAGGED_ORDER) > RAGGED_SLOTS:
            old = _SLOTS.pop(_RAGGED_ORDER.pop(0), None)
            if old is not None:
                old.owner = None
                old.close()
    return cached_slot(key, lambda: _Slot(gamma, overlap, sample_from_anchor, mode=mode, sps_path=sps_table_path(sps)),
                       for_session=mode == "static")


@lru_cache(maxsize=None)
def sps_table_path(sps) -> Optional[str]:
    """An SPS table as the file SGLang loads (`--speculative-dspark-sps-table-path`, the planner level's JSON)."""
    if sps is None:
        return None
    from contracts.adapters.sglang.planner import _table_json

    path = os.path.join(_checkpoint_dir(), f"sps-{zlib.crc32(repr(sps).encode()):08x}.json")
    with open(path, "w") as f:
        f.write(_table_json(sps))
    return path


# ---- the step level ---------------------------------------------------------------------------------------------------


@dataclass
class _Handle:
    spec: EngineSpec
    slot: _Slot
    models: Models
    prefix: str
    reqs: dict = field(default_factory=dict)  # rid -> SGLang Req
    specs: dict = field(default_factory=dict)  # rid -> RequestSpec
    added: list = field(default_factory=list)
    aborted: dict = field(default_factory=dict)  # rid -> its output when aborted
    last_batch_rids: list = field(default_factory=list)
    draws: list = field(default_factory=list)  # the last step's DraftDraws (step.draft-draws)
    laws: list = field(default_factory=list)  # the last step's StepLaws (step.laws)
    generation: int = 0  # which engine this is, of all built in this process
    # rid -> finish reason, for a PD handoff whose first token already ends the request (pd_step): SGLang's decode
    # server finishes it in its next iteration's prebuilt processing, before that iteration's decode.
    handoff_done: dict = field(default_factory=dict)
    adds: int = 0  # add_requests calls so far


_GENERATION = [0]


def _finish_name(reason) -> Optional[str]:
    if reason is None:
        return None
    name = type(reason).__name__
    return {"FINISH_ABORT": "abort", "FINISH_LENGTH": "length", "FINISH_MATCHED_TOKEN": "stop",
            "FINISH_MATCHED_STR": "stop"}.get(name, name)


@contextlib.contextmanager
def _recording_accept():
    """Records what SGLang's sampled accept is handed, SGLang's own values, recomputing nothing: at
    `dspark_verify._draft_probs`, the drawn block (`DraftBlockResult.draft_tokens`), its step logits and temperatures,
    and the q it returns; at the chain kernel (`chain_speculative_sampling_triton`), the candidates and the target law."""
    from sglang.kernels.ops.speculative.dspark import dspark_accept
    from sglang.srt.speculative.dspark_components import dspark_verify

    seen: dict = {"draft": [], "chain": []}

    def copy(t):  # in SGLang's own dtype: the contracts hold a float32 law to float32 rounding
        # None: SGLANG_DSPARK_USE_GREEDY_DRAFT keeps no step logits (a one-hot draft law).
        return None if t is None else t.detach().clone()

    def draft_probs(draft_block, vocab, device):
        probs = real_probs(draft_block, vocab, device)
        seen["draft"].append((draft_block.draft_tokens.detach().clone(), copy(probs),
                              copy(draft_block.corrected_logits), copy(draft_block.temperatures)))
        return probs

    def chain(**kw):
        seen["chain"].append((kw["candidates"].detach().clone(), copy(kw["target_probs"])))
        return real_chain(**kw)

    with patched(dspark_verify, "_draft_probs", draft_probs) as real_probs, \
            patched(dspark_accept, "chain_speculative_sampling_triton", chain) as real_chain:
        yield seen


@contextlib.contextmanager
def _recording_plan():
    """Records each verify step's plan and accept as SGLang hands them to its step observers
    (`DsparkStepObservers.observe_verify_step`, called by the worker after every accept; the observers run as
    before): the ragged layout (None: every row verifies gamma + 1), the budget it was planned from, and per batch row
    correct_len and cap_trim."""
    from sglang.srt.speculative.dspark_components.dspark_observability import DsparkStepObservers

    seen: list = []

    def observe(self, **kw):
        layout = kw["layout"]
        seen.append(dict(verify_lens=None if layout is None else layout.verify_lens[: kw["bs"]].tolist(),
                         budget=kw["verify_token_budget"], correct=kw["correct_len"].tolist(),
                         cap_trim=kw["cap_trim_lens"].tolist()))
        return real(self, **kw)

    with patched(DsparkStepObservers, "observe_verify_step", observe) as real:
        yield seen


class SGLangStep:
    def _check_spec(self, spec: EngineSpec):
        from contracts.protocol import STEP_RAGGED

        if spec.verify_mode != "static" and STEP_RAGGED not in self.capabilities:
            raise NotImplementedError(f"verify_mode {spec.verify_mode!r}: engine {self.name} runs static verify only "
                                      "(no step.ragged)")
        if spec.verify_mode not in ("static", "cap-accept", "compact"):
            raise ValueError(f"verify_mode: expected static, cap-accept or compact, got {spec.verify_mode!r}")
        if spec.min_verify_len not in (0, 1):
            raise NotImplementedError(f"min_verify_len {spec.min_verify_len}: SGLang's planner fixes it at 1 "
                                      "(DSparkScheduleConfig); 0 means the same floor to every check here")
        if not 1 <= spec.gamma <= 8:
            raise ValueError(f"gamma: expected 1..8, got {spec.gamma}")
        if spec.pool_size > MAX_RUNNING:
            raise NotImplementedError(f"pool_size {spec.pool_size}: the SGLang step level's scheduler runs at most "
                                      f"{MAX_RUNNING} requests")
        if spec.max_context_len > CONTEXT_LEN:
            raise NotImplementedError(f"max_context_len {spec.max_context_len} > {CONTEXT_LEN}")

    def new_engine(self, spec: EngineSpec):
        self._check_spec(spec)
        m = models(spec.vocab_size, spec.model_seed, spec.drafter)
        slot = self._slot_for(spec)
        slot.reset()
        slot.load(m)
        slot.reseed(spec.seed)
        if slot.mode != "static":
            slot.force_budget_frac(spec.force_budget_frac)
        _GENERATION[0] += 1
        handle = _Handle(spec, slot, m, f"e{_GENERATION[0]:05d}-", generation=_GENERATION[0])
        slot.owner = handle
        return handle

    def _slot_for(self, spec):
        from contracts.adapters.sglang.options import VERIFY_MODE, option_slot

        g, overlap, sfa, mode = spec.gamma, spec.enable_overlap, spec.sample_from_anchor, spec.verify_mode

        def table(m):  # read by the ragged planner only (SGLang warns it is a no-op in static mode)
            return None if m == "static" else spec.sps

        def build(env):  # an option may set the verify mode (options.VERIFY_MODE)
            m = env.values.get(VERIFY_MODE, mode)
            return _Slot(g, overlap, sfa, options=env, mode=m, sps_path=sps_table_path(table(m)))

        return option_slot(spec, build) or _slot(g, overlap, sfa, mode, table(mode))

    def _own(self, handle):
        if handle.slot.owner is not handle:
            raise RuntimeError("this SGLang engine handle's scheduler was taken by a newer engine (one live engine per "
                               "(gamma, overlap, sample_from_anchor) at a time)")

    def _tokenized(self, handle, r, *, prefill_only: bool = False):
        """The request as the TokenizerManager sends it: every RequestSpec field through SGLang's own
        `SamplingParams`, then its `normalize` and `verify(vocab)` (SGLang's admission: a request it refuses raises
        here, never reaches the scheduler). The EOS id is a stop token id (the checkpoints' own EOS, the mask id, has
        probability 0). `prefill_only`: for a PD prefill server, which only prefills (no stop token or length ends
        it there: one more token of budget and `ignore_eos`, which in SGLang turns its stop ids off but changes no
        logit; the decode server applies them from the first token on)."""
        from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
        from sglang.srt.sampling.sampling_params import SamplingParams

        params = SamplingParams(**sampling_fields(r, prefill_only=prefill_only))
        params.normalize(STAND_IN_TOKENIZER)  # what the TokenizerManager does before sending, with its tokenizer
        params.verify(MODEL_VOCAB)
        return TokenizedGenerateReqInput(
            rid=self._sglang_rid(handle, r), input_text=None, input_ids=array("q", r.prompt), input_embeds=None,
            mm_inputs=None, token_type_ids=None, sampling_params=params, return_logprob=False, logprob_start_len=-1,
            top_logprobs_num=0, token_ids_logprob=None, stream=False)

    def add_requests(self, handle, requests, via):
        self._own(handle)
        if via != "local":
            raise NotImplementedError(f"via {via!r}: engine sglang admits local prefill only (no step.pd-handoff; "
                                      "engine sglang-pd is SGLang as a PD decode server)")
        requests = list(requests)
        self._check_requests(handle, requests)
        slot, s = handle.slot, handle.slot.scheduler
        new = {self._sglang_rid(handle, r): r for r in requests}
        with slot.env():
            s.process_input_requests([self._tokenized(handle, r) for r in requests])
            for r in requests:
                handle.specs[r.rid] = r
                handle.added.append(r.rid)
            for _ in range(len(requests) + 4):
                pending = [q for q in list(s.waiting_queue) if q.rid in new]
                if not pending and s.chunked_req is None:
                    break
                batch = slot.iterate()
                if batch is not None and not batch.forward_mode.is_extend():
                    raise RuntimeError(f"SGLang ran a {batch.forward_mode} batch while admitting requests")
                for q in (batch.reqs if batch is not None else []):
                    if q.rid in new:
                        handle.reqs[new[q.rid].rid] = q
            missing = [r.rid for r in requests if r.rid not in handle.reqs]
            if missing:
                raise RuntimeError(f"SGLang did not prefill requests {missing} (waiting queue "
                                   f"{len(s.waiting_queue)}, running {s.running_batch.batch_size()})")

    @staticmethod
    def _sglang_rid(handle, r) -> str:
        """The rid SGLang knows the request by: unique to this engine (handles share a cached Scheduler)."""
        return handle.prefix + f"{r.rid:06d}"

    @staticmethod
    def _check_requests(handle, requests) -> None:
        for r in requests:
            if r.rid in handle.specs:
                raise ValueError(f"rid: request {r.rid} was already added")
            if not r.prompt or max(r.prompt) >= handle.spec.vocab_size or min(r.prompt) < 0:
                raise ValueError(f"prompt: tokens must be in [0, {handle.spec.vocab_size}), got {r.prompt}")

    def _live(self, handle, rid) -> bool:
        q = handle.reqs.get(rid)
        return q is not None and rid not in handle.aborted and rid not in handle.handoff_done and not q.finished()

    def step(self, handle) -> StepView:
        self._own(handle)
        slot = handle.slot
        by_rid = {q.rid: rid for rid, q in handle.reqs.items()}
        before = {rid: self._output(handle, rid) for rid in handle.reqs if self._live(handle, rid)}
        seq_before = {rid: self._seq_len(handle, rid) for rid in before}
        with slot.env():
            with _recording_accept() as seen, _recording_plan() as plans:
                batch = slot.iterate()
            if batch is None or not batch.forward_mode.is_decode():
                raise RuntimeError(f"SGLang ran {None if batch is None else batch.forward_mode} where a decode step "
                                   f"was due (live requests {sorted(before)})")
        late = [by_rid[q.rid] for q in batch.reqs if by_rid.get(q.rid) in handle.handoff_done]
        if late:
            raise RuntimeError(f"SGLang decoded requests {late}, whose handed-over first token had already ended them")
        rows = [by_rid[q.rid] for q in batch.reqs if q.rid in by_rid and by_rid[q.rid] in before]
        handle.draws, handle.laws = self._sampled_rows(handle, batch, by_rid, before, seen)
        if len(plans) != 1:
            raise RuntimeError(f"SGLang's decode step ran {len(plans)} verify accepts; the adapter reads one")
        plan = plans[0]
        planned = plan["verify_lens"] is not None and plan["budget"] is not None
        view = StepView(rids=[], seq_lens=[], verify_lens=[], planned=[], budget=plan["budget"] if planned else None,
                        correct_lens=[], cap_trim=[], commit_lens=[], new_seq_lens=[], emitted=[], finished=[],
                        budget_rows=len(batch.reqs) if planned else None)  # an aborted request's row included
        T = handle.spec.gamma + 1
        row_of = {q.rid: i for i, q in enumerate(batch.reqs)}
        for rid in rows:
            q = handle.reqs[rid]
            i = row_of[q.rid]
            out = self._output(handle, rid)
            emitted = out[len(before[rid]):]
            committed = len(q.output_ids) - len(before[rid])  # what process_batch_result appended (before truncation)
            view.rids.append(rid)
            view.seq_lens.append(seq_before[rid])
            view.verify_lens.append(T if plan["verify_lens"] is None else int(plan["verify_lens"][i]))
            view.planned.append(planned)
            view.correct_lens.append(int(plan["correct"][i]))
            view.cap_trim.append(int(plan["cap_trim"][i]))
            view.commit_lens.append(committed)
            view.new_seq_lens.append(seq_before[rid] + committed)
            view.emitted.append(emitted)
            if not self._live(handle, rid):
                view.finished.append(rid)
        return view

    @staticmethod
    def _sampled_rows(handle, batch, by_rid, before, seen) -> tuple:
        """The step's sampled rows, by batch row: what SGLang's sampled accept read (StepLaws; its draft noise is
        in-kernel Philox, so none is reported) and the block it scored (DraftDraws; a static step verifies it all)."""
        if not seen["draft"]:
            return [], []
        if len(seen["draft"]) != 1 or len(seen["chain"]) != 1:
            raise RuntimeError(f"SGLang's step ran {len(seen['draft'])} sampled accepts and {len(seen['chain'])} chain "
                               "kernels; the adapter maps one of each to the batch rows")
        (blocks, q, logits, temps), = seen["draft"]
        (candidates, p), = seen["chain"]
        draws, laws = [], []
        for i, req in enumerate(batch.reqs):
            rid = by_rid.get(req.rid)
            if rid is None or rid not in before or handle.specs[rid].greedy:
                continue
            r = handle.specs[rid]
            block = tuple(blocks[i].tolist())
            # Laws over the model's whole vocabulary (padded past vocab_size), as target_next_logits reports logits.
            draws.append(DraftDraws(rid, block, block, q[i]))
            if logits is None:  # a greedy draft (an engine option): no drafter logits to report the laws with
                continue
            context = tuple(r.prompt) + tuple(before[rid][:-1])  # committed tokens before the anchor
            laws.append(StepLaws(rid, context, candidates[i].tolist(), r.temperature, r.top_k, r.top_p, p[i], q[i],
                                 logits[i], float(temps[i]), None))
        return draws, laws

    def step_laws(self, handle) -> list:
        self._own(handle)
        return list(handle.laws)

    def draft_draws(self, handle) -> list:
        self._own(handle)
        return list(handle.draws)

    def param_states(self, handle) -> list:
        """Each live request's penalty state, read from SGLang's own penalizers: the scheduler's running batch's
        `sampling_info.penalizer_orchestrator` (the worker is handed a copy without it; `copy_for_forward`), at the
        request's row. SGLang keeps the state as the penalties themselves, per row over the vocabulary: the frequency
        penalizer `frequency_penalty * count` (counts read back by dividing), the presence and repetition penalizers
        the penalty at each token they have seen, the min_new_tokens penalizer the output length it counted. A field
        is None where the request's parameter is off (SGLang's row then holds no state of its own, or none at all);
        with both presence and repetition on, the repetition penalizer's seen set is a second ParamState of the
        request."""
        from contracts.boundary.engine import ParamState

        self._own(handle)
        batch = handle.slot.scheduler.running_batch
        info = batch.sampling_info
        orch = None if info is None else info.penalizer_orchestrator
        pens = {type(p).__name__: p for p in (orch.penalizers.values() if orch is not None else ())}
        rows = {q.rid: i for i, q in enumerate(batch.reqs)}

        def row(name, attr, i):
            p = pens.get(name)
            return None if p is None or not p.is_prepared() else getattr(p, attr)[i]

        def on(name, attr, i, value, off):
            """The request's parameter as SGLang holds it (its penalizer's float32 row value where prepared): a value
            that rounds to `off` there (2e-277, say) leaves SGLang no state to keep."""
            held = row(name, attr, i)
            return (value if held is None else float(held)) != off

        states = []
        for rid in handle.added:
            if not self._live(handle, rid):
                continue
            q = handle.reqs[rid]
            if q.rid not in rows:
                raise RuntimeError(f"request {rid} is live but not in SGLang's running batch")
            i, sp = rows[q.rid], q.sampling_params
            output_len = counts = seen = seen_rep = None
            if sp.min_new_tokens > 0:
                n = row("BatchedMinNewTokensPenalizer", "len_output_tokens", i)
                output_len = 0 if n is None else int(n)
            if on("BatchedFrequencyPenalizer", "frequency_penalties", i, sp.frequency_penalty, 0.0):
                cum = row("BatchedFrequencyPenalizer", "cumulated_frequency_penalties", i)
                held = row("BatchedFrequencyPenalizer", "frequency_penalties", i)
                n = torch.zeros(1) if cum is None else torch.round(cum.double() / held.double())
                counts = {t: int(c) for t, c in enumerate(n.tolist()) if c}
            if on("BatchedPresencePenalizer", "presence_penalties", i, sp.presence_penalty, 0.0):
                cum = row("BatchedPresencePenalizer", "cumulated_presence_penalties", i)
                seen = frozenset() if cum is None else frozenset(torch.nonzero(cum != 0).flatten().tolist())
            if on("BatchedRepetitionPenalizer", "repetition_penalties", i, sp.repetition_penalty, 1.0):
                cum = row("BatchedRepetitionPenalizer", "cumulated_repetition_penalties", i)
                seen_rep = frozenset() if cum is None else frozenset(torch.nonzero(cum != 1.0).flatten().tolist())
            if seen is None:
                seen, seen_rep = seen_rep, None
            states.append(ParamState(rid, output_len, counts, seen))
            if seen_rep is not None:
                states.append(ParamState(rid, None, None, seen_rep))
        return states

    def _output(self, handle, rid) -> list:
        if rid in handle.aborted:  # the contracts' abort is immediate: what SGLang's extra forward adds is not output
            return list(handle.aborted[rid])
        q = handle.reqs[rid]
        out = list(q.output_ids)
        if q.finished() and q.finished_len is not None:
            out = out[: q.finished_len]
        return out

    def _seq_len(self, handle, rid) -> int:
        """The committed length the next step reads: SGLang's kv_committed_len (the KV holds the committed
        sequence without the pending anchor)."""
        return int(handle.reqs[rid].kv.kv_committed_len)

    def abort(self, handle, rid):
        self._own(handle)
        from sglang.srt.managers.io_struct import AbortReq

        if not self._live(handle, rid):
            raise ValueError(f"rid: request {rid} is not live")
        with handle.slot.env():
            handle.slot.scheduler.abort_request(AbortReq(rid=handle.reqs[rid].rid))
        handle.aborted[rid] = self._output(handle, rid)

    def set_overlap(self, handle, on):
        if bool(on) != handle.slot.overlap:
            raise NotImplementedError("set_overlap: SGLang fixes overlap scheduling when its Scheduler is built "
                                      "(no step.overlap-toggle)")

    def overlap_budget_lag(self, handle):
        from sglang.srt.environ import envs

        return int(envs.SGLANG_DSPARK_CONFIDENCE_RELAY_LAG_STEPS.get())

    def request_views(self, handle) -> list:
        views = []
        for rid in handle.added:
            r, q = handle.specs[rid], handle.reqs.get(rid)
            if q is None:
                continue
            out = self._output(handle, rid)
            if self._live(handle, rid):
                # seq_len: SGLang's kv_committed_len; cache_tokens: decoded from the target's real KV pool. Not observed
                # on their own: the pending anchor (SGLang's last output token) and the draft context length (the
                # draft shares the target's request rows and lengths; reported as seq_len).
                seq_len = self._seq_len(handle, rid)
                views.append(RequestView(rid, tuple(r.prompt), out, True, None, seq_len, int(q.output_ids[-1]),
                                         handle.slot.cache_tokens(q, seq_len), seq_len))
            else:
                reason = "abort" if rid in handle.aborted else handle.handoff_done.get(rid) or _finish_name(q.finished_reason)
                views.append(RequestView(rid, tuple(r.prompt), out, False, reason))
        return views

    def target_next_logits(self, handle, sequence) -> torch.Tensor:
        last = int(list(sequence)[-1])
        return (handle.slot.scale * handle.models.lm_head[:, last]).to(torch.float64)
