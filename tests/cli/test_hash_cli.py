"""``skillflow hash`` on the upstream document shape and the project's own, and on bad input."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from skillflow.cli import app

GOLDEN_HASH = "5e6b70e86ec21732b51dd93e2ddd9627b12c43186d3d048e7a8d356b41c37e12"
runner = CliRunner()

UPSTREAM = {
    "query": "refund order A1",
    "steps": {
        "Step 1: lookup_order": {
            "arguments": {"order_id": "A1"},
            "result": {"id": "A1"},
            "error": None,
            "timestamp": None,
        },
        "Step 2: issue_refund": {
            "arguments": {"order_id": "A1", "amount": 5},
            "result": {},
            "error": "",
            "timestamp": None,
        },
    },
}
PROJECT = {
    "steps": [
        {"tool": "lookup_order", "arguments": {"order_id": "Z9"}, "result": {"id": "Z9"}},
        {"tool": "issue_refund", "arguments": {"amount": 12, "order_id": "Z9"}, "result": {"accepted": True}},
    ]
}


def _write(tmp_path: Path, doc: object, name: str = "run.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return path


def _hash_json(path: Path) -> dict:  # type: ignore[type-arg]
    result = runner.invoke(app, ["hash", str(path), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


def test_upstream_shape_hashes_to_the_golden_vector(tmp_path: Path) -> None:
    body = _hash_json(_write(tmp_path, UPSTREAM))
    assert body["canonical_hash"] == GOLDEN_HASH
    assert body["signature"] == [
        {"arg_keys": ["order_id"], "errored": False, "tool": "lookup_order"},
        {"arg_keys": ["amount", "order_id"], "errored": False, "tool": "issue_refund"},
    ]
    assert body["tool_sequence"] == "lookup_order > issue_refund" and body["steps"] == 2


def test_project_shape_and_bare_list_agree(tmp_path: Path) -> None:
    assert _hash_json(_write(tmp_path, PROJECT))["canonical_hash"] == GOLDEN_HASH
    assert _hash_json(_write(tmp_path, PROJECT["steps"], "list.json"))["canonical_hash"] == GOLDEN_HASH


def test_error_class_and_retries_show(tmp_path: Path) -> None:
    doc = {
        "steps": [
            {"tool": "lookup_order", "arguments": {"order_id": "A1"}, "error": "timeout", "error_class": "Timeout"},
            {"tool": "lookup_order", "arguments": {"order_id": "A1"}, "result": {}},
            {
                "tool": "issue_refund",
                "arguments": {"order_id": "A1", "amount": 5},
                "error": "no",
                "error_class": "Declined",
            },
        ]
    }
    body = _hash_json(_write(tmp_path, doc))
    assert [u["retry_count"] for u in body["units"]] == [1, 0]
    assert body["units"][1]["error_class"] == "Declined" and body["canonical_hash"] != GOLDEN_HASH
    table = runner.invoke(app, ["hash", str(_write(tmp_path, doc, "t.json"))])
    assert table.exit_code == 0 and "Declined" in table.output and body["canonical_hash"] in table.output


def test_empty_run_has_no_identity(tmp_path: Path) -> None:
    assert _hash_json(_write(tmp_path, {"steps": []}))["canonical_hash"] is None
    out = runner.invoke(app, ["hash", str(_write(tmp_path, {"steps": {}}, "e.json"))])
    assert out.exit_code == 0 and "no identity" in out.output


def test_bad_input_exits_2(tmp_path: Path) -> None:
    cases = {
        "bad.json": "{not json",
        "shape.json": {"query": "no steps here"},
        "scalar.json": "42",
        "steps.json": {"steps": "Step 1: x"},
        "unnamed.json": {"steps": [{"arguments": {}}]},
    }
    for name, doc in cases.items():
        result = runner.invoke(app, ["hash", str(_write(tmp_path, doc, name))])
        assert result.exit_code == 2, (name, result.output)
        assert "error" in result.output
    missing = runner.invoke(app, ["hash", str(tmp_path / "absent.json")])
    assert missing.exit_code == 2 and "cannot read" in missing.output
