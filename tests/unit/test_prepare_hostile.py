"""``prepare`` never raises into the agent, and the request it returns is always strict JSON.

Hostile values in every parameter (wrong types, NaN/inf, bytes, non-text keys, objects whose
``__str__``/``__repr__`` raise, lone surrogates, huge text): the agent gets a :class:`Prepared` whose
``request`` passes ``json.dumps(..., allow_nan=False)`` and encodes as UTF-8. An argument that cannot be
used degrades the turn to a request without skills, the reason in ``error``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from skillflow.injection.conversation import Conversation
from skillflow.kernel.models import InjectionRole, SkillStatus
from skillflow.runtime import Prepared, Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from tests.unit.test_prompting import QUERY, add_skill, sf_for


class BadStr:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class BadIter:
    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("no iter")

    def __len__(self) -> int:
        return 1


class BadDump:
    """An object that looks like an SDK model and is not one: ``model_dump`` raises."""

    def model_dump(self, **_: Any) -> dict[str, Any]:
        raise RuntimeError("no dump")


class SelfDump:
    """``model_dump`` returns a dict holding the object again (and again): read to a bounded depth."""

    dumps = 0

    def model_dump(self, **_: Any) -> dict[str, Any]:
        SelfDump.dumps += 1
        return {"role": "user", "content": [self, {"nan": math.nan}], "again": SelfDump()}


class OddDump:
    """``model_dump`` is not a method, or returns no dict."""

    model_dump = "not callable"


class StrDump:
    def model_dump(self, **_: Any) -> str:
        return "just text"


class BadEq:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no eq")

    __hash__ = object.__hash__


def msg(content: Any, **extra: Any) -> dict[Any, Any]:
    return {"role": "user", "content": content, **extra}


# (parameter, value): the hostile inputs the figures in docs/RELIABILITY.md count.
HOSTILE: list[tuple[str, Any]] = [
    ("query", None),
    ("query", 5),
    ("query", b"refund"),
    ("query", {"q": 1}),
    ("query", ["refund"]),
    ("query", BadStr()),
    ("query", math.nan),
    ("query", "\ud800 refund"),
    ("query", QUERY * 200_000),
    ("user_id", None),
    ("user_id", 5),
    ("user_id", b"u"),
    ("user_id", {"u": 1}),
    ("user_id", BadStr()),
    ("history", None),
    ("history", 5),
    ("history", "hello"),
    ("history", [1, 2]),
    ("history", [None]),
    ("history", BadIter()),
    ("history", {"role": "user"}),
    ("history", [msg(math.nan)]),
    ("history", [msg(b"x")]),
    ("history", [{1: "x", "role": "user"}]),
    ("history", [msg(BadStr())]),
    ("history", [msg(object())]),
    ("history", [BadDump(), msg("x")]),
    ("history", [SelfDump()]),
    ("history", [OddDump(), StrDump()]),
    ("history", [msg([BadDump(), SelfDump(), StrDump()])]),
    ("system_prompt", [BadDump(), {"type": "text", "text": "x"}]),
    ("history", [msg("\ud800")]),
    ("history", [msg([math.inf, {"k": {2, 3}}])]),
    ("memories", None),
    ("memories", 5),
    ("memories", [BadStr()]),
    ("memories", BadIter()),
    ("memories", [b"x", math.nan]),
    ("memories", [{"content": BadStr()}]),
    ("workflows", None),
    ("workflows", 5),
    ("workflows", [1]),
    ("workflows", BadIter()),
    ("workflows", [BadStr()]),
    ("workflows", [{"id": BadStr(), "canonical_hash": "h", "query": BadStr()}]),
    ("system_prompt", 5),
    ("system_prompt", b"be nice"),
    ("system_prompt", BadStr()),
    ("system_prompt", ["x"]),
    ("system_prompt", "\ud800"),
    ("conversation", 5),
    ("conversation", "text"),
    ("conversation", BadStr()),
    ("conversation", [1]),
    ("provider", "gemini"),
    ("provider", None),
    ("provider", 5),
    ("provider", {"x": 1}),
    ("provider", BadEq()),
]


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Skillflow, str]]:
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('prepare') / 'db.sqlite'}")
    migrate(engine)
    sid = add_skill(engine, "a", "u", "h1", SkillStatus.ACTIVE, InjectionRole.USER)
    yield sf_for(engine, "a"), sid
    engine.dispose()


def _check(prepared: Any) -> None:
    assert isinstance(prepared, Prepared)
    text = json.dumps(prepared.request, allow_nan=False, ensure_ascii=False)
    text.encode("utf-8")  # no lone surrogate either: what the SDK sends must encode
    messages = prepared.request["messages"]
    assert isinstance(messages, list) and messages and messages[-1]["role"] == "user"
    assert isinstance(messages[-1]["content"], str)
    if prepared.error is not None:
        assert prepared.skill_ids == () and prepared.skills == [] and prepared.reason != "injected"


def test_a_good_call_injects_the_skill(agent: tuple[Skillflow, str]) -> None:
    sf, sid = agent
    prepared = sf.prepare(QUERY, "u")
    assert prepared.skill_ids == (sid,) and prepared.error is None


@pytest.mark.parametrize(("param", "value"), HOSTILE, ids=[f"{p}-{i}" for i, (p, _) in enumerate(HOSTILE)])
def test_a_hostile_argument_never_raises(agent: tuple[Skillflow, str], param: str, value: Any) -> None:
    sf, _ = agent
    kwargs: dict[str, Any] = {"query": QUERY, "user_id": "u", param: value}
    prepared = sf.prepare(kwargs.pop("query"), kwargs.pop("user_id"), **kwargs)
    _check(prepared)
    if param == "provider" or (param in ("query", "user_id") and not isinstance(value, str)):
        assert prepared.error is not None and param in prepared.error


def test_an_sdk_like_object_that_dumps_itself_again_is_read_a_bounded_number_of_times(
    agent: tuple[Skillflow, str],
) -> None:
    """Its dump held it again: each copy was dumped anew, two branches a level down to the depth limit (100 s for
    one ``prepare``, found reviewing the change that reads SDK objects). A dump that holds the object is a cycle."""
    SelfDump.dumps = 0
    _check(agent[0].prepare(QUERY, "u", history=[SelfDump(), {"role": "user", "content": [SelfDump()]}]))
    assert 0 < SelfDump.dumps <= 200, SelfDump.dumps


def test_a_request_that_cannot_be_assembled_with_its_skill_says_no_skill_was_injected(
    agent: tuple[Skillflow, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from skillflow import runtime

    real = runtime.assemble

    def failing(query: str, *, skills: Any = (), **kwargs: Any) -> Any:
        if skills:
            raise ValueError("a skill that cannot be rendered")
        return real(query, skills=skills, **kwargs)

    monkeypatch.setattr(runtime, "assemble", failing)
    prepared = agent[0].prepare(QUERY, "u")
    _check(prepared)
    assert "could not be assembled" in (prepared.error or "") and prepared.reason == ""


def test_unknown_provider_degrades_to_the_openai_shape(agent: tuple[Skillflow, str]) -> None:
    sf, _ = agent
    prepared = sf.prepare(QUERY, "u", provider="gemini")  # type: ignore[arg-type]
    assert prepared.error == "unknown provider; expected one of openai, anthropic, ollama, openai-compatible"
    assert prepared.request["messages"][-1] == {"role": "user", "content": QUERY}
    assert prepared.skill_ids == ()


def test_history_values_are_coerced_to_json(agent: tuple[Skillflow, str]) -> None:
    sf, sid = agent
    history = [msg(math.nan), msg(b"abc"), {"role": "assistant", "content": "ok", 7: {1, 2}}, msg("\ud800")]
    prepared = sf.prepare(QUERY, "u", history=history)
    _check(prepared)
    assert prepared.skill_ids == (sid,)  # coercible values are not a reason to drop the skill
    got = prepared.request["messages"][1:5]
    assert got == [
        msg(None),
        msg("<3 bytes>"),
        {"role": "assistant", "content": "ok", "7": [1, 2]},
        msg("\ufffd"),
    ]
    assert history[0]["content"] != history[0]["content"]  # the caller's list is not mutated (still NaN)


class Weird:
    def __str__(self) -> str:
        raise ValueError("boom")


LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters() | st.sampled_from(["\ud800", "\x00"]), max_size=20),
    st.binary(max_size=8),
    st.builds(BadStr),
    st.builds(Weird),
    st.builds(object),
)
JSONISH = st.recursive(
    LEAF,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=5) | st.integers() | st.builds(BadStr), inner, max_size=3)
    ),
    max_leaves=10,
)
MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "tool"]) | JSONISH}).map(
    lambda m: m
) | st.dictionaries(st.text(max_size=8), JSONISH, max_size=4)
# Objects of other types than JSON's: a fixed set. Arbitrary ``st.from_type(type)`` instances once built an
# object whose construction killed the xdist worker (a signal/process type), which proves nothing about prepare.
ODD = st.sampled_from(
    [
        lambda: complex(1, 2),
        lambda: {1, 2},
        lambda: frozenset({"a"}),
        lambda: bytearray(b"x"),
        lambda: memoryview(b"x"),
        lambda: range(3),
        lambda: (x for x in range(2)),
        lambda: Decimal("NaN"),
        lambda: datetime(2026, 1, 1, tzinfo=UTC),
        lambda: ValueError("x"),
        lambda: int,
        lambda: print,
        lambda: Ellipsis,
        lambda: NotImplemented,
    ]
).map(lambda make: make())
ANY = JSONISH | ODD | st.builds(BadIter) | st.builds(BadEq)


@settings(
    deadline=None, suppress_health_check=list(HealthCheck), database=None
)  # examples: the profile (tests/conftest.py)
@given(
    query=st.text(max_size=40) | ANY,
    user_id=st.sampled_from(["u", "other"]) | ANY,
    history=st.lists(MESSAGE | ANY, max_size=4) | ANY,
    memories=st.lists(JSONISH, max_size=3) | ANY,
    workflows=st.lists(st.dictionaries(st.sampled_from(["id", "canonical_hash", "query"]), JSONISH), max_size=3) | ANY,
    system_prompt=st.none() | st.text(max_size=20) | ANY,
    conversation=st.none() | st.builds(Conversation) | ANY,
    provider=st.sampled_from(["openai", "anthropic", "ollama", "openai-compatible"]) | ANY,
)
def test_prepare_never_raises_and_returns_strict_json(
    agent: tuple[Skillflow, str],
    query: Any,
    user_id: Any,
    history: Any,
    memories: Any,
    workflows: Any,
    system_prompt: Any,
    conversation: Any,
    provider: Any,
) -> None:
    sf, _ = agent
    prepared = sf.prepare(
        query,
        user_id,
        history=history,
        memories=memories,
        workflows=workflows,
        system_prompt=system_prompt,
        conversation=conversation,
        provider=provider,
    )
    _check(prepared)
    if isinstance(provider, str) and provider == "anthropic" and prepared.error is None:
        assert isinstance(prepared.request["system"], str)


def test_record_conversation_never_raises_on_hostile_messages(engine: Engine, tmp_path: Any) -> None:
    sf = Skillflow(agent_id="a", engine=engine, spool_dir=tmp_path / "spool")
    for messages in (None, 5, "text", [None, 5], BadIter(), [msg(BadStr())], [msg("\ud800")], [{BadStr(): 1}]):
        for user in ("u", "u\ud800", None, BadStr()):
            for cid in ("c1", "c\ud800", None, BadStr()):
                results = sf.record_conversation(messages, user, conversation_id=cid)  # type: ignore[arg-type]
                assert all(r.stored or r.error for r in results)  # no procedure in it: no result


def test_a_conversation_with_lone_surrogates_is_stored(engine: Engine, tmp_path: Any) -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "cancel_reservation", "arguments": '{"id": "R\\ud800"}'},
    }
    messages = [
        msg("cancel R1 \ud800 please"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok \udfff"},
    ]
    sf = Skillflow(agent_id="a", engine=engine, spool_dir=tmp_path / "spool")
    results = sf.record_conversation(messages, "u", conversation_id="conv\ud800")  # an id refuses one
    assert results and all(r.stored for r in results), [r.error for r in results]
    assert not (tmp_path / "spool").exists()  # stored, not spooled
