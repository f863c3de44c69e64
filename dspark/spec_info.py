"""Speculative algorithm enum, the spec-input base, and the DP count scaling rule.

Mirrors `sglang/srt/speculative/spec_info.py`.
"""

from __future__ import annotations

import enum
from typing import Optional

from dspark import _validate


class SpecInput:
    """Base of every speculative input.

    The defaults live on the class on purpose (as in SGLang): dataclass
    subclasses assign their own fields, and these stay valid for the rest.
    `num_tokens_per_req == -1` means "unset"; scaling refuses it.
    """

    num_tokens_per_req: int = -1
    num_tokens_for_logprob_per_req: int = -1
    cuda_graph_compatible: bool = True
    ragged_verify_layout = None
    custom_mask = None
    dsa_topk_indices = None
    future_dsa_topk_indices_available: bool = False

    def is_draft_input(self) -> bool:
        return False

    def is_verify_input(self) -> bool:
        return False


class SpeculativeAlgorithm(enum.Enum):
    NONE = enum.auto()
    EAGLE = enum.auto()
    EAGLE3 = enum.auto()
    STANDALONE = enum.auto()
    NGRAM = enum.auto()
    DFLASH = enum.auto()
    DSPARK = enum.auto()

    @classmethod
    def from_string(cls, name: Optional[str]) -> "SpeculativeAlgorithm":
        if name is None:
            return cls.NONE
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(f"speculative_algorithm: unknown {name!r}; choose from {[m.name for m in cls]}") from None

    def is_none(self) -> bool:
        return self is SpeculativeAlgorithm.NONE

    def is_eagle(self) -> bool:
        return self in (SpeculativeAlgorithm.EAGLE, SpeculativeAlgorithm.EAGLE3)

    def is_dflash(self) -> bool:
        return self is SpeculativeAlgorithm.DFLASH

    def is_dspark(self) -> bool:
        return self is SpeculativeAlgorithm.DSPARK

    def is_dflash_family(self) -> bool:
        """DSpark reuses DFlash's spec-v2 draft input, so they share handoff code."""
        return self.is_dflash() or self.is_dspark()

    def build_disagg_draft_input(self, batch, last_tokens_tensor, future_map):
        """Build the decode-side draft input after a PD prefill handoff.

        Returns None only for NONE. The historical bug this guards against: the
        DSPARK branch was missing, the dispatch fell through to None, and the
        first decode crashed on `None.prepare_for_decode`. Algorithms the
        reference does not model raise instead of falling through.
        """
        from dspark import disaggregation  # late: disaggregation imports this module

        if self.is_none():
            return None
        if self.is_dspark():
            return disaggregation.build_dspark_disagg_draft_input(batch, last_tokens_tensor, future_map)
        if self.is_dflash():
            return disaggregation.build_dflash_disagg_draft_input(batch, last_tokens_tensor, future_map)
        raise NotImplementedError(f"the reference engine does not model the PD handoff for {self.name}")


def draft_query_width(gamma: int, sample_from_anchor: bool) -> int:
    """Q, the draft forward's tokens per request: gamma when the anchor row samples the first draft, else gamma + 1."""
    return gamma if sample_from_anchor else gamma + 1


def spec_scale_global_num_tokens(spec_info: SpecInput, global_num_tokens, global_num_tokens_for_logprob):
    """Scale per-DP-rank request counts to token counts: `count * num_tokens_per_req`.

    Pure: returns new lists, preserves length, order and zeros.
    """
    width = spec_info.num_tokens_per_req
    logprob_width = spec_info.num_tokens_for_logprob_per_req
    for name, w in (("num_tokens_per_req", width), ("num_tokens_for_logprob_per_req", logprob_width)):
        _validate.positive_int(f"spec_info.{name}", w)
    counts = _validate.count_list("global_num_tokens", global_num_tokens)
    logprob_counts = _validate.count_list("global_num_tokens_for_logprob", global_num_tokens_for_logprob)
    _validate.same_ranks(global_num_tokens=counts, global_num_tokens_for_logprob=logprob_counts)
    return [c * width for c in counts], [c * logprob_width for c in logprob_counts]
