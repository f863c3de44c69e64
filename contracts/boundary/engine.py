"""Planner and step levels: verify-length planning, and a running decode engine.

Planner level: functions of the draft's confidence (budget, verify lengths, the
compact layout), and the planner's whole per-step decision (`plan_layout`). The
engine computes survival itself, in its own precision. Step level: an engine handle the contracts drive request
by request and step by step, observed through plain views.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, Tuple

import torch

# ---- planner level ----------------------------------------------------------------


@dataclass(frozen=True)
class SpsSpec:
    """A steps-per-second cost table: `steps` (floor lookup over probes) or `additive`."""

    kind: str  # "steps" | "additive"
    probes: Tuple[int, ...] = ()  # steps: batch-token probes
    values: Tuple[float, ...] = ()  # steps: steps/s at each probe
    bias_seconds: float = 1e-3  # additive: step_time = bias + alpha(bs) + theta(tokens)
    alpha_points: Tuple[Tuple[float, float], ...] = ()
    theta_points: Tuple[Tuple[float, float], ...] = ()


FLAT_SPS = SpsSpec("steps", (1,), (1.0,))
SURVIVAL_EPS = 1e-6  # a cell is valid when its survival is >= eps (the planners' default; a PlanCase step uses it)


@dataclass(frozen=True)
class ScheduleCase:
    confidence: Tuple[Tuple[float, ...], ...]  # [bs][gamma] in [0, 1]
    budget: int
    min_verify_len: int = 1
    eps: float = SURVIVAL_EPS

    @property
    def gamma(self) -> int:
        return len(self.confidence[0]) if self.confidence else 1


@dataclass(frozen=True)
class BudgetCase:
    confidence: Tuple[Tuple[float, ...], ...]  # the (lagged) confidence the budget reads, [bs][gamma] in [0, 1]
    sps: Optional[SpsSpec]  # None = the uninitialised (flat) table
    force_budget_frac: Optional[float] = None
    eps: float = SURVIVAL_EPS


@dataclass(frozen=True)
class PlanCase:
    """One step of the verify planner: this step's confidence, the mode, the cost table, a forced fraction,
    and the captured verify graphs (compact mode pads to their token tiers)."""

    confidence: Tuple[Tuple[float, ...], ...]
    verify_mode: str  # "static" | "cap-accept" | "compact"
    sps: Optional[SpsSpec]
    force_budget_frac: Optional[float] = None
    capture_bs: Optional[Tuple[int, ...]] = None  # None: no captured graphs (eager)

    @property
    def gamma(self) -> int:
        return len(self.confidence[0])


@dataclass
class PlanView:
    budget: Optional[int]  # the resolved verify-token budget; None when the planner sets none
    verify_lens: Optional[list]  # per request; None = no layout (verify all T)
    graph_num_tokens: Optional[int] = None  # the padded token tier of a compact layout
    qo_indptr: Optional[list] = None


@dataclass(frozen=True)
class LayoutCase:
    verify_lens: Tuple[int, ...]
    gamma: int
    pad_extra: int = 0  # padding rows past sum(L)
    padded_bs: int = 0  # pad_verify_lens_to_graph: pad rows beyond bs


@dataclass
class CompactView:
    qo_indptr: list
    req_id: list
    within: list
    valid: list
    packed: torch.Tensor  # packed candidate ids
    scattered: torch.Tensor  # packed rows scattered back to [bs, T] with the fill


class PlannerLevel(Protocol):
    def new_sps_table(self, sps: SpsSpec) -> Any: ...  # raises ValueError on an invalid table
    def sps_lookup(self, sps: SpsSpec, tokens: int) -> float: ...  # steps-kind tables
    def verify_token_budget(self, confidence: torch.Tensor, sps: Optional[SpsSpec], force_budget_frac, eps: float) -> int: ...
    # (L per request, the selected cells [bs, gamma] bool or None when the engine does not expose them)
    def schedule_verify_lens(self, confidence: torch.Tensor, budget: int, min_verify_len: int,
                             eps: float) -> Tuple[list, Optional[torch.Tensor]]: ...
    def plan_layout(self, case: PlanCase) -> PlanView: ...
    def compact_layout(self, verify_lens, width: int, pad_to: Optional[int], candidates: torch.Tensor,
                       fill: float) -> CompactView: ...
    def pad_verify_lens_to_graph(self, verify_lens, graph_num_tokens: int, padded_bs: int) -> list: ...


# ---- step level -------------------------------------------------------------------


@dataclass(frozen=True)
class EngineSpec:
    vocab_size: int = 8
    gamma: int = 3
    drafter: str = "vanilla"  # vanilla | gated | rnn | oracle | random
    verify_mode: str = "static"  # static | cap-accept | compact
    force_budget_frac: Optional[float] = None
    sps: Optional[SpsSpec] = None
    min_verify_len: int = 1
    enable_overlap: bool = False
    sample_from_anchor: bool = True
    seed: int = 0
    model_seed: int = 0
    capture_bs: Optional[Tuple[int, ...]] = None
    pool_size: int = 16
    max_context_len: int = 128
    # Engine options by the engine's own names, (name, value) pairs, from the pack's `engine_options`; the pack's
    # new_engine applies them (and refuses a name it does not declare, naming this field).
    options: Tuple[Tuple[str, str], ...] = ()


@dataclass(frozen=True)
class EngineOption:
    """An option the engine documents as changing no output: `passive` (observability: metrics, dumps, recorders,
    tracing) or `output-preserving` (a mode: overlap scheduling, a kernel backend). `value` turns it on. With
    `same_seed`, a sampled request gives the same tokens on and off for the same seed (a passive option that draws
    no randomness and moves no schedule); without, only the greedy tokens must match. An option the pack cannot turn
    on here says why in `not_exercised`, and the report lists it."""

    name: str
    kind: str  # "passive" | "output-preserving"
    value: str = "1"
    off: str = "0"  # the value of the run it is compared with (an option a spec field also sets is set both ways)
    same_seed: bool = True
    not_exercised: str = ""  # the reason, where the contracts cannot turn it on


OPTION_KINDS = ("passive", "output-preserving")


@dataclass(frozen=True)
class OptionCase:
    """One declared option, on and off, over the same requests and engine configuration."""

    option: str
    case: "LoopCase"


@dataclass(frozen=True)
class RequestSpec:
    """One request. The fields after `top_p` are the whole-request parameters (`request.*` capabilities); their
    defaults change nothing, and their meaning is written down once, in `contracts.request_oracle`."""

    rid: int
    prompt: Tuple[int, ...]
    temperature: float = 0.0
    max_new_tokens: int = 8
    eos_id: Optional[int] = None
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0  # 1 = off
    min_new_tokens: int = 0
    min_p: float = 0.0  # 0 = off
    logit_bias: Tuple[Tuple[int, float], ...] = ()  # (token id, bias) pairs, token ids distinct
    stop_token_ids: Tuple[int, ...] = ()
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1


@dataclass(frozen=True)
class RequestSemantics:
    """Where engines document the same parameter differently, the pack says which reading its engine documents
    (`request_semantics`); the oracle applies it. The defaults are SGLang's (penaltylib, sampling_batch_info)."""

    repetition_counts_prompt: bool = False  # vLLM: the prompt's tokens are penalised too; SGLang: the output's only
    repetition_before_additive: bool = False  # vLLM scales first, then subtracts; SGLang subtracts, then scales
    # SGLang's ignore_eos also turns its stop token ids off (Req._check_token_based_finish returns first), in plain
    # and speculative decoding alike; elsewhere it ignores the EOS id only.
    ignore_eos_ignores_stop_ids: bool = False


@dataclass(frozen=True)
class ParamState:
    """What one live request's parameter state holds after a step, as the engine keeps it. A field is None where
    the engine keeps no such state for this request (its parameter off)."""

    rid: int
    output_len: Optional[int]  # output tokens the min_new_tokens rule has counted
    token_counts: Optional[dict]  # token -> occurrences the frequency penalty counts (zero counts left out)
    seen: Optional[frozenset]  # tokens the presence / repetition penalties treat as already generated


class RequestStateLevel(Protocol):
    # After the last step: the parameter state the next step's forward reads, for every live request; a request
    # whose engine keeps its state in more than one place (one per penalizer) may have one ParamState per place.
    def param_states(self, handle) -> list: ...


@dataclass
class StepView:
    rids: list
    seq_lens: list  # committed lengths the step started from
    verify_lens: list
    planned: list  # False: verify-all (static mode, or a request's first decode)
    budget: Optional[int]
    correct_lens: list
    cap_trim: list
    commit_lens: list
    new_seq_lens: list
    emitted: list  # tokens each request got (after EOS / max_new_tokens)
    finished: list  # rids that left the batch
    # The rows the step's budget was planned over, where the engine's batch held planned rows this view leaves out
    # (SGLang keeps an aborted request for one more forward); None: exactly the view's planned rows.
    budget_rows: Optional[int] = None


@dataclass
class RequestView:
    rid: int
    prompt: tuple
    output: list  # every emitted token, the first sampled one included
    live: bool
    finish_reason: Optional[str]
    seq_len: Optional[int] = None  # the committed length the next step will read (live only)
    bonus: Optional[int] = None  # the pending anchor the next step will read (live only)
    cache_tokens: Optional[list] = None  # the target cache (live only)
    draft_ctx_len: Optional[int] = None


class StepLevel(Protocol):
    def new_engine(self, spec: EngineSpec) -> Any: ...  # raises ValueError naming the field on a bad spec
    def add_requests(self, handle, requests, via: str) -> None: ...  # via "local" (prefill here) or "pd" (handoff)
    def step(self, handle) -> StepView: ...
    def abort(self, handle, rid: int) -> None: ...
    def set_overlap(self, handle, on: bool) -> None: ...
    # Steps after overlap is switched on (or an engine starts with it) whose ragged-mode budget has nothing resolved
    # to read (the confidence relay's lag); without overlap every ragged step has a budget.
    def overlap_budget_lag(self, handle) -> int: ...
    def request_views(self, handle) -> list: ...  # every request ever added, live or done
    def target_next_logits(self, handle, sequence) -> torch.Tensor: ...  # the engine's target model, one call


@dataclass
class StepLaws:
    """One sampled request in the last step: the laws its accept read, and how its drafts were drawn."""

    rid: int
    context: tuple  # the committed tokens before the step's anchor
    candidates: list  # [T]: the anchor, then the drafts
    temperature: float
    top_k: int
    top_p: float
    target_probs: torch.Tensor  # [T, V]: the target law the accept read at each column
    draft_probs: torch.Tensor  # [gamma, V]: the draft law the accept scored each draft with
    draft_logits: torch.Tensor  # [gamma, V]: the drafter's logits for each slot
    draft_temperature: float
    # [gamma, V]: Gumbel noise, draft k = argmax(draft_logits[k] / T + draft_noise[k]); None where the engine draws
    # its own noise out of reach (SGLang's in-kernel Philox): the draws are then held to q statistically (DIST-002).
    draft_noise: Optional[torch.Tensor]


class StepLawsLevel(Protocol):
    def step_laws(self, handle) -> list: ...  # StepLaws of the last step's sampled rows


@dataclass(frozen=True)
class DraftDraws:
    """One sampled request in the last step: the block its drafter drew, and what the verify scored of it. For an
    engine whose drafts are multinomial draws (no noise to report), the draft law is checked statistically."""

    rid: int
    block: tuple  # the gamma drafts as drawn, in order
    verified: tuple  # the drafts the step verified (the anchor excluded)
    draft_probs: torch.Tensor  # [len(verified), V]: the law the accept scores each verified draft with


class DraftDrawsLevel(Protocol):
    def draft_draws(self, handle) -> list: ...  # DraftDraws of the last step's sampled rows


@dataclass(frozen=True)
class DraftContextUpdate:
    """What one request's draft context gained in the last step: the target features of consecutive positions."""

    rid: int
    start: int  # the position of the first feature added
    features: torch.Tensor  # [k, D]: the features added, in position order, as the drafter will read them


class DraftContextLevel(Protocol):
    def draft_context_updates(self, handle) -> list: ...  # DraftContextUpdate of every request the last step ran
    # [len(sequence), D] float64, recomputed from scratch: row i is the target's feature reading sequence[i] after
    # sequence[:i] (the independent side, like target_next_logits).
    def target_features(self, handle, sequence) -> torch.Tensor: ...


@dataclass(frozen=True)
class LoopCase:
    """An engine configuration and the requests it serves (for whole-run contracts)."""

    spec: EngineSpec
    requests: Tuple[RequestSpec, ...]
