"""A lean agent process: what a first ``prepare`` loads, no process-wide settings, a runtime-only install.

Each process test starts a fresh interpreter (skillflow.lab.bench.agent_bench) against a seeded SQLite tenant.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine

from skillflow.injection.applicability import RULES
from skillflow.injection.embeddings import HashingEmbedder, MiniLMEmbedder
from skillflow.kernel.models import InjectionRole, SkillStatus
from skillflow.lab.bench.agent_bench import HEAVY, child, seed
from skillflow.runtime import Skillflow
from skillflow.storage.skills import transition

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULES = 1000  # a first prepare loaded 4,406 with the torch embedder and about 770 without


@cache
def _process(live: bool, tmp: str) -> dict[str, Any]:
    url = f"sqlite:///{Path(tmp) / ('live' if live else 'empty')}.db"
    seed(url, "minilm", live)
    return child(url, calls=2, env={"SKILLFLOW_EMBEDDER": "minilm"})


@pytest.fixture(scope="module")
def processes(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, dict[str, Any]]:
    tmp = str(tmp_path_factory.mktemp("agent"))
    return {live: _process(live, tmp) for live in (True, False)}


def test_a_first_prepare_with_a_live_skill_loads_no_heavy_package(processes: dict[bool, dict[str, Any]]) -> None:
    report = processes[True]
    loaded = set(report["modules"])
    assert report["skill_ids"], "the live skill matches the request: the request was embedded with MiniLM"
    assert "skillflow.injection.minilm" in loaded
    assert [m for m in HEAVY if m in loaded] == []
    assert report["modules_after_prepare"] <= MAX_MODULES


def test_a_tenant_without_a_skill_never_loads_the_embedder(processes: dict[bool, dict[str, Any]]) -> None:
    report = processes[False]
    loaded = set(report["modules"])
    assert report["skill_ids"] == []
    assert not {"skillflow.injection.minilm", "tokenizers", "safetensors"} & loaded
    assert [m for m in HEAVY if m in loaded] == []


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(names: list[str]) -> set[str]:
    """The installed distributions ``names`` require, transitively (requirements under an extra left out)."""
    seen: set[str] = set()
    todo = [_norm(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for req in requires:
            if "extra ==" not in req:
                todo.append(_norm(re.split(r"[\s;<>=!~\[(]", req, maxsplit=1)[0]))
    return seen


def test_every_third_party_module_the_agent_loads_is_a_base_dependency(
    processes: dict[bool, dict[str, Any]],
) -> None:
    """import skillflow.runtime + a first prepare (embedding) + record_run stay within the base install."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base = [re.split(r"[\s;<>=!~\[(]", d, maxsplit=1)[0] for d in project["dependencies"]]
    allowed = _closure(base)
    owners = metadata.packages_distributions()
    bare = subprocess.run(  # what the interpreter loads by itself (site hooks such as setuptools' .pth)
        [sys.executable, "-c", "import sys; print(' '.join(sys.modules))"], capture_output=True, text=True, check=True
    ).stdout.split()
    tops = {m.split(".")[0] for m in processes[True]["modules"]} - {m.split(".")[0] for m in bare}
    third_party = sorted(t for t in tops if t in owners and t not in sys.stdlib_module_names)
    outside = {t: owners[t] for t in third_party if not {_norm(d) for d in owners[t]} & allowed}
    assert {"numpy", "sqlalchemy", "tokenizers", "safetensors"} <= set(third_party)
    assert outside == {}
    pipeline = {_norm(d) for d in project["optional-dependencies"]["pipeline"]}
    assert not {_norm(b) for b in base} & {re.split(r"[<>=!~\[]", p)[0] for p in pipeline}


def test_the_embedder_changes_no_process_wide_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY"):
        monkeypatch.delenv(name, raising=False)
    before, had_torch = dict(os.environ), "torch" in sys.modules
    vectors = MiniLMEmbedder().embed(["cancel my reservation"])
    assert vectors.shape == (1, 384)
    assert dict(os.environ) == before
    assert ("torch" in sys.modules) == had_torch  # torch (and its thread setting) never touched


class _Recording(HashingEmbedder):
    """The hashing embedder, keeping every text it was asked to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += list(texts)
        return super().embed(texts)


def test_no_embedding_until_the_tenant_has_a_live_skill(engine: Engine) -> None:
    from skillflow.injection.views import RECENT_TEXTS
    from tests.support.lifecycle import config, make_skill

    RULES.clear()
    RECENT_TEXTS.clear()  # the process's recent requests' vectors (an earlier test's request is one)
    emb = _Recording()
    flow = Skillflow(agent_id="agent", engine=engine, config=config(), embedder=emb, continual_learning=True)
    shadow = make_skill(engine, "h-cancel", status=SkillStatus.SHADOW)
    selection = flow.select_skills("cancel my reservation", "u1")
    assert (selection.state, selection.reason, selection.skills) == ("uncalibrated", "no live skill", [])
    assert flow.prepare("cancel my reservation", "u1").skill_ids == ()
    assert emb.texts == []
    with engine.begin() as conn:  # the skill goes live: the very next request is embedded and gets it
        transition(conn, shadow.id, SkillStatus.ACTIVE, actor="test", injection_role=InjectionRole.USER)
    assert flow.prepare("cancel my reservation", "u1").skill_ids == (shadow.id,)
    assert emb.texts == ["cancel my reservation"]
