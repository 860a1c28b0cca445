"""The block ranges ``InsertFollower`` keeps per partition (``detection/follow.py``): a part is new when it spans a
block number not seen before, so a merge is not new and a part a replica fetched late is."""

from __future__ import annotations

from sparktap.detection.follow import _covered, _with


def test_ranges_merge_when_they_touch_and_keep_a_hole_apart() -> None:
    seen: list[tuple[int, int]] = []
    for blocks in [(1, 1), (2, 2), (3, 3), (5, 5), (6, 6)]:
        seen = _with(seen, blocks)
    assert seen == [(1, 3), (5, 6)]
    assert _with(seen, (4, 4)) == [(1, 6)]  # the late part closes the hole
    assert _with(seen, (1, 6)) == [(1, 6)]  # as does a merge over it
    assert _with([(1, 3)], (2, 3)) == [(1, 3)]


def test_a_merge_of_seen_parts_is_not_new_and_a_late_part_or_a_merge_over_a_hole_is() -> None:
    seen = [(1, 3), (5, 6)]
    assert _covered(seen, (1, 3)) and _covered(seen, (2, 3)) and _covered(seen, (6, 6))
    assert not _covered(seen, (4, 4))  # fetched by this replica after block 5 and 6
    assert not _covered(seen, (1, 6))  # spans the hole
    assert not _covered(seen, (7, 7))
    assert not _covered([], (0, 0))
