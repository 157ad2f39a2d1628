"""The launch's tile order (`aref.backend.tile_order`): a bijection onto the grid, the generated expression equal to the
integer rule, rasterization keeping a wave's reads small, and the backend emitting it."""
import itertools

import pytest

from aref.backend.tile_order import group_rows, tile_coords, tile_coords_source


@pytest.mark.parametrize("grid", [(1,), (7,), (4, 4), (6, 5), (32, 32), (12, 3, 2), (1, 1, 5), (9, 1, 3)])
@pytest.mark.parametrize("raster", [0, 1, 2, 4, 8, 64])
def test_every_tile_once_and_source_equals_rule(grid, raster):
    full = tuple(grid) + (1,) * (3 - len(grid))
    tiles = full[0] * full[1] * full[2]
    source = tile_coords_source("tile", grid, raster)
    seen = set()
    for t in range(tiles):
        c = tile_coords(t, grid, raster)
        assert all(0 <= c[i] < full[i] for i in range(3)), (t, c)
        assert eval(source, {"__builtins__": {}}, {"tile": t}) == c
        seen.add(c)
    assert seen == set(itertools.product(*(range(g) for g in full)))


def test_unrasterized_order_is_x_fastest():
    assert [tile_coords(t, (3, 2)) for t in range(4)] == [(0, 0, 0), (1, 0, 0), (2, 0, 0), (0, 1, 0)]


def test_group_rows_divides_the_axis():
    assert group_rows(32, 8) == 8 and group_rows(12, 8) == 6 and group_rows(7, 4) == 1 and group_rows(4, 8) == 4
    assert group_rows(10, 0) == 1


def test_raster_walks_a_group_of_rows_column_by_column():
    order = [tile_coords(t, (4, 3), 2)[:2] for t in range(6)]
    assert order == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]


def test_raster_shrinks_a_wave_footprint():
    """132 CTAs of a 4096² GEMM with 128×128 tiles: x fastest they read all 32 row panels of A and 5 column
    panels of B; in groups of 8 rows, 8 row panels and 17 column panels."""
    def panels(raster):
        wave = [tile_coords(t, (32, 32), raster) for t in range(132)]
        return len({c[0] for c in wave}) + len({c[1] for c in wave})
    assert panels(0) == 32 + 5 and panels(8) == 8 + 17
