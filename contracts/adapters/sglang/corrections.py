"""The minimal in-process corrections of SGLang 0.5.23's own functions, one per finding (the pack's ledger names
each). Each takes a pytest MonkeyPatch and patches SGLang in memory only, never on disk. The findings tests show
each makes its contract pass; `check` re-runs a contract whose failure is known with all of them applied, so a
known finding cannot hide another failure of the same contract."""

import torch


def row_widened_for_dflash(mp):
    """Widen the row for the decode reserve for the DFlash family as for UNO (page >= 1)."""
    from sglang.srt.mem_cache import allocation_sizing as az
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    real = az.get_req_to_token_extra_context_len

    def widened():
        extra = real()
        algo = SpeculativeAlgorithm.from_string(get_spec().speculative_algorithm)
        if algo.is_dflash_family():
            extra = max(extra, az.get_alloc_reserve_per_decode() + az.get_alloc_page_size() - 1)
        return extra

    mp.setattr(az, "get_req_to_token_extra_context_len", widened)


def forced_fraction_skips_verify_all_cache(mp):
    """Let a forced budget fraction reach the scheduler in compact mode with a flat table."""
    from sglang.srt.speculative.dspark_components.dspark_planner import DSparkVerifyPlanner

    real = DSparkVerifyPlanner.schedule_layout

    def schedule_layout(self, **kw):
        forced = self._budget_planner is not None and self._budget_planner.forced_budget_frac is not None
        if not (forced and self._is_verify_all):
            return real(self, **kw)
        self._is_verify_all = False
        try:
            return real(self, **kw)
        finally:
            self._is_verify_all = True

    mp.setattr(DSparkVerifyPlanner, "schedule_layout", schedule_layout)


def host_relay_ring(mp):
    """The CUDA path's ring, on the host: copy confidence and writer generations at each publish, read LAG back."""
    from sglang.srt.managers import overlap_utils as ou

    real_init = ou.ConfidenceRelay._lazy_init

    def lazy_init(self, confidence):
        real_init(self, confidence)
        if self.conf_ring is None:
            depth, gamma = ou.CONFIDENCE_RELAY_RING_DEPTH, confidence.shape[-1]
            self.conf_ring = torch.zeros((depth, self.req_pool_size, gamma), dtype=torch.float32)
            self.gen_ring = torch.zeros((depth, self.req_pool_size), dtype=torch.int64)

    def issue_ring_copy(self, *, stream, publish_ready):
        if not self.initialized:
            return
        slot = self.ring_pos % ou.CONFIDENCE_RELAY_RING_DEPTH
        self.conf_ring[slot].copy_(self.confidence_buf)
        self.gen_ring[slot].copy_(self.pool.req_generation)
        self.ring_pos += 1

    def resolve(self, batch, *, stream, publish_ready):
        fi = None if batch.spec_info is None else batch.spec_info.future_indices
        if not self.initialized or fi is None or fi.shape[0] == 0 or self.ring_pos < ou.CONFIDENCE_RELAY_RING_LAG:
            return None
        slot = (self.ring_pos - ou.CONFIDENCE_RELAY_RING_LAG) % ou.CONFIDENCE_RELAY_RING_DEPTH
        idx = batch.req_pool_indices_cpu
        return ou.ResolvedConfidence(confidence=self.conf_ring[slot][idx], generation=self.gen_ring[slot][idx])

    mp.setattr(ou.ConfidenceRelay, "_lazy_init", lazy_init)
    mp.setattr(ou.ConfidenceRelay, "issue_ring_copy", issue_ring_copy)
    mp.setattr(ou.ConfidenceRelay, "resolve", resolve)
