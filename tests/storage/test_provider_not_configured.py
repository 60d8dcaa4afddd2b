"""A distiller or judge configured without its key fails the cycle naming the variable (an outside audit, 2026-12-05).

Before, ``SKILLFLOW_DISTILLER=openai`` without ``SKILLFLOW_OPENAI_API_KEY`` made ``skillflow cycle`` exit 0 with every
eligible class rejected as ``distillation failed: LLMError``: the key was named nowhere, and each class was backed
off for ``rejection_backoff_cycles`` as if the model had refused it, so fixing the key changed nothing for three
cycles. A missing key is a configuration error: nothing is recorded, and the message names the variable.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.promotion.cycle import run_partition
from skillflow.promotion.llm import ProviderNotConfigured
from skillflow.storage.schema import class_state, reports, skillbox
from tests.support.promotion import AGENT, agent, record_cancel

pytestmark = pytest.mark.usefixtures("offline_providers")


@pytest.mark.parametrize(
    ("provider", "role", "variable"),
    [
        ("openai", "DISTILLER", "SKILLFLOW_OPENAI_API_KEY"),
        ("anthropic", "DISTILLER", "SKILLFLOW_ANTHROPIC_API_KEY"),
        ("openai", "JUDGE", "SKILLFLOW_OPENAI_API_KEY"),
    ],
)
def test_a_missing_key_fails_the_partition_naming_it_and_backs_nothing_off(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, provider: str, role: str, variable: str
) -> None:
    sf = agent(engine)
    for i in range(6):
        record_cancel(sf, "u1", i)
    for name in ("SKILLFLOW_OPENAI_API_KEY", "SKILLFLOW_ANTHROPIC_API_KEY", "SKILLFLOW_LLM_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(f"SKILLFLOW_{role}", provider)
    assert sf.config is not None
    with pytest.raises(ProviderNotConfigured, match=variable):
        run_partition(engine, AGENT, "u1", sf.config, flow_run_id="run-1")
    with engine.connect() as conn:
        for table in (class_state, skillbox, reports):
            assert conn.execute(select(func.count()).select_from(table)).scalar_one() == 0, table.name
    monkeypatch.setenv(f"SKILLFLOW_{role}", "offline")  # fixed: the class is distilled at the next cycle
    assert run_partition(engine, AGENT, "u1", sf.config, flow_run_id="run-2").promoted


def test_the_cycle_and_distill_commands_name_the_missing_key(
    engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sf = agent(engine)
    hashes = {record_cancel(sf, "u1", i) for i in range(6)}
    monkeypatch.delenv("SKILLFLOW_OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("SKILLFLOW_LLM_BASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    env = {"SKILLFLOW_DISTILLER": "openai"}
    for args in (["cycle", "--db", db_url], ["distill", next(iter(hashes))[:12], "--agent-id", AGENT,
                                             "--user-id", "u1", "--db", db_url]):  # fmt: skip
        result = CliRunner().invoke(app, args, env=env)
        assert result.exit_code == 2, (args, result.output, result.exception)
        assert "SKILLFLOW_OPENAI_API_KEY" in result.stderr and "Traceback" not in result.output, result.stderr
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(class_state)).scalar_one() == 0
