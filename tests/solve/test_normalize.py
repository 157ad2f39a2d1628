"""Cost normalization (Twill 5.2)."""

import pytest

from solve import normalize_costs
from solve.attention import fa_forward_blackwell
from solve.normalize import normalize_graph


def test_small_costs_stay_as_they_are():
    norm = normalize_costs([1, 2, 3, 3, 5])
    assert norm.mapping == {1: 1, 2: 2, 3: 3, 5: 5} and norm.exact


def test_proportional_costs_shrink_exactly():
    norm = normalize_costs([1024, 512, 128, 64, 1088], budget=300)
    assert norm.exact and norm.error == 0
    assert norm.mapping == {64: 1, 128: 2, 512: 8, 1024: 16, 1088: 17}
    assert norm.scale == 64


def test_incommensurable_costs_keep_ratios_approximately_and_order():
    norm = normalize_costs([1000, 333, 17], budget=20)
    assert not norm.exact and sum(norm.mapping.values()) <= 20
    assert norm.mapping[17] <= norm.mapping[333] <= norm.mapping[1000]
    assert all(v >= 1 for v in norm.mapping.values())
    # The optimum beats the naive "everything is one unit" answer.
    assert norm.error < 1000 - 17


def test_too_many_distinct_costs_for_the_budget():
    with pytest.raises(ValueError, match="cannot fit"):
        normalize_costs(list(range(1, 30)), budget=10)


def test_normalized_attention_graph_is_exact():
    g = fa_forward_blackwell()
    small, norm = normalize_graph(g)
    assert norm.exact
    assert small.ops["qk_A"].usage["tc"] * norm.scale == g.ops["qk_A"].usage["tc"]
