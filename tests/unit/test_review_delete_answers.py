"""Deleting the reviewer's stored answers from the Prefect server (``tasks.review.delete_answers``): only answers,
under both wait states, and never a failed review because of it (docs/SECURITY.md); the end-to-end cases are in
``tests/flows/test_review_answer_deleted.py``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from uuid import uuid4

import httpx
import pytest
from prefect.exceptions import PrefectHTTPStatusError

from tasks.review import delete_answers

RUN = str(uuid4())
SECRET = "hunter2hunter2"


class Server:
    """The run's stored inputs as the Prefect API serves them (a page of at most ``limit``); ``fail`` makes a
    delete raise."""

    def __init__(self, keys: list[str], fail: BaseException | None = None) -> None:
        self.keys, self.fail = list(keys), fail
        self.asked: list[str] = []

    def filter(self, key_prefix: str, limit: int = 1, exclude_keys: Any = None, flow_run_id: Any = None) -> Any:
        self.asked.append(key_prefix)
        found = [k for k in self.keys if k.startswith(key_prefix) and k not in (exclude_keys or set())]
        return [SimpleNamespace(key=k, value=f'{{"reason": "{SECRET}"}}') for k in found[:limit]]

    def delete(self, key: str, flow_run_id: Any = None) -> None:
        if self.fail is not None:
            raise self.fail
        self.keys.remove(key)


def _serve(monkeypatch: pytest.MonkeyPatch, server: Server) -> Server:
    import prefect.input.actions as actions

    monkeypatch.setattr(actions, "filter_flow_run_input", server.filter)
    monkeypatch.setattr(actions, "delete_flow_run_input", server.delete)
    return server


def test_only_answers_go_under_both_wait_states(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [f"{state}-review-r{r}-{i:012x}-{part}" for state in ("paused", "suspended") for r in (1, 2) for i in
            range(60) for part in ("schema", "description", "response")]  # fmt: skip
    server = _serve(monkeypatch, Server([*keys, "other-key-response"]))
    assert delete_answers(RUN, "review-r") == 240  # more than one page of each state
    assert sorted(server.keys) == sorted([k for k in keys if not k.endswith("-response")] + ["other-key-response"])
    assert set(server.asked) == {"paused-review-r", "suspended-review-r"}


def _http_error(status: int, message: str = "") -> PrefectHTTPStatusError:
    request = httpx.Request("DELETE", "http://prefect/api/flow_runs/x/input/k")
    return PrefectHTTPStatusError(message, request=request, response=httpx.Response(status, request=request))


def test_an_answer_already_gone_counts_as_deleted(monkeypatch: pytest.MonkeyPatch) -> None:
    _serve(monkeypatch, Server(["paused-review-r1-a-response"], _http_error(404)))
    assert delete_answers(RUN, "review-r") == 1


@pytest.mark.parametrize(
    "failure",
    [
        ConnectionError(f"server down while deleting {SECRET}"),
        _http_error(500, f"500 for {SECRET}"),
    ],
)
def test_a_failure_never_fails_the_review_and_logs_no_text(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, failure: Exception
) -> None:
    _serve(monkeypatch, Server(["suspended-review-r1-a-response"], failure))
    assert delete_answers(RUN, "review-r") == 0
    assert f"could not delete the reviewer's answers of flow run {RUN}: {type(failure).__name__}" in caplog.text
    assert SECRET not in caplog.text


def test_no_flow_run_deletes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _serve(monkeypatch, Server(["paused-review-r1-a-response"]))
    assert delete_answers(None, "review-r") == 0 and server.asked == [] and server.keys
