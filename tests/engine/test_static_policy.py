from __future__ import annotations

import pytest

from adaptivespec.engine.static_policy import FixedK, StaticTable
from adaptivespec.errors import ConfigError


def test_static_table_maps_batch_size_to_k() -> None:
    table = StaticTable.parse([(17, 32, 2), (1, 16, 4)], default_k=0)
    assert [table.k_for(b, 100) for b in (1, 16, 17, 32, 33, 500)] == [4, 4, 2, 2, 0, 0]


@pytest.mark.parametrize("triples", [[(1, 8, 4), (8, 16, 2)], [(0, 4, 2)], [(5, 4, 2)], [(1, 4, -1)]])
def test_bad_tables_are_refused(triples: list[tuple[int, int, int]]) -> None:
    with pytest.raises(ConfigError):
        StaticTable.parse(triples)


def test_fixed_k_refuses_negative() -> None:
    with pytest.raises(ConfigError):
        FixedK(-1)
