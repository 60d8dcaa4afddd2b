"""Which skill of an intent: the vectorised chooser is the written rule, on arbitrary procedures and calls."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from skillflow.injection.procedures import Chooser, champion, follows
from skillflow.injection.rule import LiveSkill

TOOLS = ["get_user", "get_reservation", "search", "calculate", "cancel"]
tool = st.sampled_from(TOOLS)
skill = st.builds(
    LiveSkill,
    skill_id=st.text("abcdef", min_size=1, max_size=3),
    canonical_hash=st.just("h"),
    intent=st.just("cancel"),
    procedure=st.lists(tool, max_size=6).map(lambda p: (*p, "cancel")),
    rank=st.one_of(st.just(()), st.tuples(st.sampled_from([0.5, 0.8, 1.0]), st.integers(1, 30).map(float))),
)


@settings(deadline=None)
@given(st.lists(skill, min_size=1, max_size=12), st.lists(st.one_of(tool, st.just("unknown_tool")), max_size=7))
def test_the_chooser_picks_what_the_rule_says(skills: list[LiveSkill], prefix: list[str]) -> None:
    expected = champion(skills, prefix)
    got = Chooser(skills).choose(prefix)
    assert got is not None and expected is not None
    assert got.skill_id == expected.skill_id and got.procedure == expected.procedure


def test_follows_is_the_longest_common_subsequence() -> None:
    assert follows((), ("a", "b")) == 0
    assert follows(("a", "b"), ("a", "x", "b", "c")) == 2
    assert follows(("b", "a"), ("a", "b")) == 1  # order matters
    assert follows(("a", "a", "a"), ("a", "b", "a")) == 2  # repeats count as often as the procedure makes them
    assert Chooser([]).choose(("a",)) is None and champion([], ()) is None


LONG_TOOLS = [f"t{i}" for i in range(9)]


@settings(deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(LONG_TOOLS), min_size=0, max_size=80), min_size=1, max_size=8),
    st.lists(st.sampled_from([*LONG_TOOLS, "unknown_tool"]), max_size=30),
)
def test_the_chooser_counts_the_followed_calls_of_long_procedures(procs: list[list[str]], prefix: list[str]) -> None:
    """Both paths (bit-parallel up to 64 calls, the row-by-row DP beyond) give the written LCS per procedure."""
    skills = [LiveSkill(f"s{i}", "h", "w", (*p, "w"), ()) for i, p in enumerate(procs)]
    chooser = Chooser(skills)
    got = dict(zip((s.procedure for s in chooser.skills), chooser._followed(prefix).tolist(), strict=True))
    assert got == {s.procedure: follows(tuple(prefix), s.procedure) for s in chooser.skills}
    assert (chooser.masks is None) == (max(len(s.procedure) for s in skills) > 64)
