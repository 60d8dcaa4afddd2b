"""Redaction over a real corpus: no digit, email or detector finding survives in any τ-bench user message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillflow.promotion.detectors import literal_findings
from skillflow.promotion.redact import redact_query

TAU = Path("/work/shared/corpora/tau-bench/gpt-4o-airline.json")


@pytest.mark.skipif(not TAU.exists(), reason=f"τ-bench corpus not present at {TAU}")
def test_tau_bench_user_messages_keep_no_literal() -> None:
    data = json.loads(TAU.read_text(encoding="utf-8"))
    messages = [str(m.get("content") or "") for ep in data for m in ep.get("traj") or [] if m.get("role") == "user"]
    assert len(messages) > 1000
    leaks = []
    for text in messages:
        out = redact_query(text)
        if any(ch.isdigit() for ch in out) or "@" in out or literal_findings(out):
            leaks.append(out)
    assert leaks == [], (len(leaks), leaks[:3])
