"""Handoff bugs, the first of them the historical DSPARK None fall-through."""

import torch

from dspark import disaggregation, overlap_utils
from dspark.schedule_batch import ScheduleBatch
from dspark.spec_info import SpeculativeAlgorithm

from . import Mutant

_real_builder = disaggregation.build_dspark_disagg_draft_input
_real_publish = overlap_utils.FutureMap.publish
_real_stash = overlap_utils.FutureMap.stash
_real_seed = disaggregation._seed_relay
_real_prebuilt = ScheduleBatch.prebuilt.__func__


def _prebuilt_counts_the_prompt_only(cls, reqs, pool, **kw):
    """Seq lens from the prompt alone: right whenever a request carries one output, wrong for a resumed one."""
    batch = _real_prebuilt(cls, reqs, pool, **kw)
    batch.seq_lens = torch.tensor([len(r.origin_input_ids) for r in reqs], dtype=torch.int64)
    return batch


def _dispatch_without_dspark(self, batch, last_tokens_tensor, future_map):
    if self.is_dflash():
        return disaggregation.build_dflash_disagg_draft_input(batch, last_tokens_tensor, future_map)
    return None  # the DSPARK branch is missing: falls through


def _wrapped_builder(transform):
    def build(batch, last_tokens_tensor, future_map):
        spec_info = _real_builder(batch, last_tokens_tensor, future_map)
        transform(batch, spec_info)
        return spec_info
    return build


def _set(field, value_fn):
    return _wrapped_builder(lambda batch, di: setattr(di, field, value_fn(batch, di)))


def _stash_then_publish(batch, spec_info, payload, future_map):
    future_map.stash(batch.req_pool_indices, payload)
    future_map.publish(batch.req_pool_indices, batch.seq_lens)


def _skip_stash(batch, spec_info, payload, future_map):
    future_map.publish(batch.req_pool_indices, batch.seq_lens)


def _publish_even_without_overlap(batch, last_tokens_tensor, future_map):
    spec_info = _real_builder(batch, last_tokens_tensor, future_map)
    if not batch.enable_overlap and future_map is not None:
        future_map.publish(batch.req_pool_indices, batch.seq_lens)
    return spec_info


def _idle_publish_pads_row0(self, indices, new_seq_lens, confidence=None, generation=None):
    if indices.numel() == 0:  # an idle rank "pads" onto the CUDA-graph padding row
        indices, new_seq_lens = torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)
    return _real_publish(self, indices, new_seq_lens, confidence, generation)


MUTANTS = [
    Mutant("dspark-dispatch-falls-through-to-None", ("HANDOFF-001", "HANDOFF-010"),
           lambda mp: mp.setattr(SpeculativeAlgorithm, "build_disagg_draft_input", _dispatch_without_dspark)),
    Mutant("bonus-in-reversed-batch-order", ("HANDOFF-002",),
           lambda mp: mp.setattr(disaggregation, "build_dspark_disagg_draft_input",
                                 _set("bonus_tokens", lambda b, di: di.bonus_tokens.flip(0)))),
    Mutant("seq-lens-count-the-anchor", ("HANDOFF-003",),
           lambda mp: mp.setattr(disaggregation, "build_dspark_disagg_draft_input",
                                 _set("new_seq_lens", lambda b, di: di.new_seq_lens + 1))),
    Mutant("prebuilt-seq-lens-ignore-earlier-outputs", ("HANDOFF-003",),
           lambda mp: mp.setattr(ScheduleBatch, "prebuilt", classmethod(_prebuilt_counts_the_prompt_only))),
    Mutant("future-indices-are-batch-rows", ("HANDOFF-004",),
           lambda mp: mp.setattr(disaggregation, "build_dspark_disagg_draft_input",
                                 _set("future_indices", lambda b, di: None if di.future_indices is None
                                      else torch.arange(len(di.future_indices))))),
    Mutant("claims-stale-dsa-seed", ("HANDOFF-005",),
           lambda mp: mp.setattr(disaggregation, "build_dspark_disagg_draft_input",
                                 _set("future_dsa_topk_indices_available", lambda b, di: b.enable_overlap))),
    Mutant("stash-before-publish", ("HANDOFF-006",),
           lambda mp: mp.setattr(disaggregation, "_seed_relay", _stash_then_publish)),
    Mutant("relay-stash-skipped", ("HANDOFF-006", "HANDOFF-007"),
           lambda mp: mp.setattr(disaggregation, "_seed_relay", _skip_stash)),
    Mutant("publish-without-overlap", ("HANDOFF-008",),
           lambda mp: mp.setattr(disaggregation, "build_dspark_disagg_draft_input", _publish_even_without_overlap)),
    Mutant("idle-rank-publishes-padding-row", ("HANDOFF-009",),
           lambda mp: mp.setattr(overlap_utils.FutureMap, "publish", _idle_publish_pads_row0)),
]
