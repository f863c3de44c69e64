"""Unit tests of the verify planner, with the values SGLang 0.5.23 printed on CPU where there are any."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dspark import planner

F64 = torch.float64


def test_survival_is_the_cumulative_product():
    conf = torch.tensor([[0.5, 0.5, 1.0], [1.0, 0.0, 0.9]], dtype=F64)
    assert planner.survival(conf).tolist() == [[0.5, 0.25, 0.25], [1.0, 0.0, 0.0]]


@given(st.lists(st.floats(0, 1), min_size=1, max_size=8))
def test_survival_never_increases_along_a_row(row):
    s = planner.survival(torch.tensor([row], dtype=F64))[0]
    assert bool((s[1:] <= s[:-1]).all())


def test_sps_lookup_is_the_largest_probe_at_or_below():
    table = planner.SpsCostTable((4, 8, 16), (3.0, 2.0, 1.0))
    assert [table.lookup(n) for n in (0, 3, 4, 7, 8, 15, 16, 99)] == [3.0, 3.0, 3.0, 3.0, 2.0, 2.0, 1.0, 1.0]
    assert table.max_batch_tokens == 16


@pytest.mark.parametrize("probes, values, field", [
    ((4, 4), (1.0, 1.0), "sample_batch_tokens"), ((8, 4), (1.0, 1.0), "sample_batch_tokens"),
    ((), (), "sample_batch_tokens"), ((1, 2), (1.0,), "sample_steps_per_sec"), ((1,), (0.0,), "sample_steps_per_sec"),
])
def test_sps_table_rejects(probes, values, field):
    with pytest.raises(ValueError, match=field):
        planner.SpsCostTable(probes, values)


def test_sps_table_max_batch_tokens_must_cover_the_last_probe():
    with pytest.raises(ValueError, match="max_batch_tokens"):
        planner.SpsCostTable((1, 8), (1.0, 1.0), max_batch_tokens=4)


def test_additive_table_interpolates_and_validates():
    t = planner.SpsAdditiveCostTable(0.01, ((1, 0.0), (3, 0.02)), ((4, 0.0), (8, 0.04)))
    assert t.step_time(2, 6) == pytest.approx(0.01 + 0.01 + 0.02)
    assert t.step_time(0, 100) == pytest.approx(0.01 + 0.0 + 0.04)  # clamped at both ends
    with pytest.raises(ValueError, match="bias_seconds"):
        planner.SpsAdditiveCostTable(0.0, ((1, 0.0),), ((1, 0.0),))
    with pytest.raises(ValueError, match="theta_points"):
        planner.SpsAdditiveCostTable(0.1, ((1, 0.0),), ((2, 0.0), (2, 0.1)))


def test_flat_table_budget_is_verify_all():  # SGLang printed budget 12 for bs=3, gamma=4
    surv = planner.survival(torch.full((3, 4), 0.9, dtype=F64))
    assert planner.compute_verify_token_budget(surv) == 12
    assert planner.compute_verify_token_budget(surv, planner.flat_sps_table()) == 12


def test_flat_table_skips_cells_below_eps():
    surv = torch.tensor([[1.0, 1e-9], [0.5, 0.25]], dtype=F64)
    assert planner.compute_verify_token_budget(surv) == 3


def test_forced_fraction():  # SGLang printed 6 for frac 0.5, bs=3, gamma=4
    surv = planner.survival(torch.full((3, 4), 0.9, dtype=F64))
    assert planner.compute_verify_token_budget(surv, force_budget_frac=0.5) == 6
    assert planner.compute_verify_token_budget(surv, force_budget_frac=0.3) == 3  # floor(3.6)
    assert planner.compute_verify_token_budget(surv, force_budget_frac=1.0) == 12
    for bad in (0.0, -0.5, 1.5, True, "0.5"):
        with pytest.raises(ValueError, match="force_budget_frac"):
            planner.compute_verify_token_budget(surv, force_budget_frac=bad)


def test_budget_stops_where_extra_tokens_cost_more_than_they_bring():
    surv = torch.tensor([[0.9, 0.1], [0.8, 0.05]], dtype=F64)
    # 2 requests: SPS halves past 3 batch tokens, so only the best cell (0.9) is worth verifying.
    table = planner.SpsCostTable((1, 4), (2.0, 1.0))
    assert planner.compute_verify_token_budget(surv, table) == 1


def test_schedule_extremes():  # budget 0 -> all 1; budget >= bs*gamma -> all T
    surv = planner.survival(torch.full((3, 4), 0.9, dtype=F64))
    assert planner.schedule_verify_lens(surv, 0).tolist() == [1, 1, 1]
    assert planner.schedule_verify_lens(surv, 12).tolist() == [5, 5, 5]
    assert planner.schedule_verify_lens(surv, 100).tolist() == [5, 5, 5]


def test_schedule_tie_order_is_value_then_position_then_request():
    surv = torch.tensor([[1.0, 1.0, 0.5], [1.0, 1.0, 0.5]], dtype=F64)
    lens, picked = planner.schedule_verify_lens(surv, 3, return_selected=True)
    assert picked.tolist() == [[True, True, False], [True, False, False]]
    assert lens.tolist() == [3, 2]


def test_schedule_min_verify_len_and_cap():
    surv = torch.tensor([[0.9, 0.8], [0.1, 0.05]], dtype=F64)
    assert planner.schedule_verify_lens(surv, 2, min_verify_len=2).tolist() == [3, 2]
    assert planner.schedule_verify_lens(surv, 4, max_verify_len=2).tolist() == [2, 2]
    assert planner.schedule_verify_lens(surv, 2, min_verify_len=0).tolist() == [2, 1]


def test_compact_layout_packs_and_scatters():
    lens = torch.tensor([2, 3, 1])
    layout = planner.RaggedVerifyLayout.from_lens(lens, 4, pad_to=8)
    assert layout.qo_indptr.tolist() == [0, 2, 5, 6]
    assert layout.req_id.tolist() == [0, 0, 1, 1, 1, 2, 3, 3]
    assert layout.within.tolist() == [0, 1, 0, 1, 2, 0, 0, 0]
    assert layout.window_index().tolist() == [0, 1, 4, 5, 6, 8, -1, -1]
    cand = torch.arange(10, 22).reshape(3, 4)
    packed = layout.pack(cand)
    assert packed.tolist() == [10, 11, 14, 15, 16, 18, 0, 0]
    back = layout.scatter(packed, -1)
    assert back.tolist() == [[10, 11, -1, -1], [14, 15, 16, -1], [18, -1, -1, -1]]
    rows = torch.randn(8, 5, dtype=F64)
    assert layout.scatter(rows).shape == (3, 4, 5)


def test_compact_layout_rejects_bad_lens():
    with pytest.raises(ValueError, match="verify_lens"):
        planner.RaggedVerifyLayout.from_lens(torch.tensor([0, 2]), 4)
    with pytest.raises(ValueError, match="verify_lens"):
        planner.RaggedVerifyLayout.from_lens(torch.tensor([5]), 4)
    with pytest.raises(ValueError, match="pad_to"):
        planner.RaggedVerifyLayout.from_lens(torch.tensor([3, 3]), 4, pad_to=5)


def test_pad_verify_lens_to_bucket():  # SGLang printed [2,5,1,0] for tier 8, padded_bs 4
    assert planner.pad_verify_lens_to_bucket(torch.tensor([2, 5, 1]), 8, 4).tolist() == [2, 5, 1, 0]
    assert planner.pad_verify_lens_to_bucket(torch.tensor([2, 5, 1]), 13, 5).tolist() == [2, 5, 1, 3, 2]
    assert planner.pad_verify_lens_to_bucket(torch.tensor([2, 5, 1]), 10, 3).tolist() == [2, 5, 3]
    with pytest.raises(ValueError, match="graph_num_tokens"):
        planner.pad_verify_lens_to_bucket(torch.tensor([2, 5, 1]), 7, 4)
    with pytest.raises(ValueError, match="padded_bs"):
        planner.pad_verify_lens_to_bucket(torch.tensor([2, 5, 1]), 8, 2)
