"""Properties of the string bounds written into Delta stats (no table needed)."""

from __future__ import annotations

import pytest

pytest.importorskip("deltalake")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from partialcow.commit.delta import STATS_STRING_PREFIX, _truncate_upper  # noqa: E402

# Code points without surrogates (not encodable in UTF-8), weighted towards the edges where carrying happens.
chars = st.one_of(
    st.characters(blacklist_categories=("Cs",)),
    st.sampled_from(["\U0010ffff", "\ud7ff", "\ue000", "\x7f", "a", "z"]),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(chars, max_size=3 * STATS_STRING_PREFIX).map("".join), st.text(max_size=5))
def test_truncated_max_is_an_upper_bound_in_byte_order(text: str, suffix: str) -> None:
    bound = _truncate_upper(text)
    if bound is None:  # only when every kept character is U+10FFFF
        assert set(text[:STATS_STRING_PREFIX]) == {"\U0010ffff"}
        return
    assert len(bound) <= STATS_STRING_PREFIX
    assert bound.encode("utf-8") >= text.encode("utf-8")
    if len(text) > STATS_STRING_PREFIX:
        # it bounds every string sharing the kept prefix, whatever follows
        same_prefix = text[:STATS_STRING_PREFIX] + suffix
        assert bound.encode("utf-8") > same_prefix.encode("utf-8", "surrogatepass")
    else:
        assert bound == text


def test_surrogate_range_is_skipped() -> None:
    text = "x" * (STATS_STRING_PREFIX - 1) + "\ud7ff" + "tail"
    assert _truncate_upper(text) == "x" * (STATS_STRING_PREFIX - 1) + "\ue000"
