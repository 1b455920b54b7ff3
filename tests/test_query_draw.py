"""The seeded query draw of the QKT paper (Sec. 4.1): classes, sizes, seeds."""

import pytest

from flowerbed.protocols.query_draw import draw_query, under_represented


def test_queries_come_from_under_represented_classes_seeded():
    counts = [100, 3, 0, 60, 49, 50, 0]
    assert under_represented(counts, 50) == [1, 2, 4, 6]
    for seed in range(20):
        single = draw_query(counts, 50, "single", seed)
        assert len(single) == 1 and single[0] in (1, 2, 4, 6)
        multi = draw_query(counts, 50, "multi", seed, max_classes=3)
        assert 2 <= len(multi) <= 3 and set(multi) <= {1, 2, 4, 6} and multi == sorted(set(multi))
        assert draw_query(counts, 50, "multi", seed) == multi  # same seed, same query
    assert {tuple(draw_query(counts, 50, "single", s)) for s in range(40)} == {
        (1,),
        (2,),
        (4,),
        (6,),
    }
    assert {len(draw_query(counts, 50, "multi", s, max_classes=4)) for s in range(40)} == {2, 3, 4}
    assert draw_query([80, 90], 50, "multi", 0) == []  # nothing under-represented: no query
    assert draw_query([80, 1], 50, "multi", 0) == [1]  # one eligible class
    with pytest.raises(ValueError, match="valid choices: single, multi"):
        draw_query(counts, 50, "some", 0)
