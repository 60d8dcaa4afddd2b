"""Applicability on the bench bank, the simulator and API-Bank: the fitted rule vs the fixed 0.70 rule vs the ceiling.

Every set runs through :func:`skillflow.lab.bench.applicability_bench.evaluate` (the product's ``fit`` and
``decide``, the same rows and rates as τ-bench); only the history and the splits differ.

- **Bench bank** (:mod:`skillflow.lab.bench.paraphrase_bank`, 25 intents x 5 trigger + 3 held-out
  paraphrases, single-turn, no episodes): the history is every intent's trigger paraphrases, the probes
  are the held-out paraphrases (never in the history). A real tenant's history also holds requests no
  skill answers, so in each of 5 rounds every fifth intent (round *r*: intents *r*, *r*+5, …) has **no
  skill**: its trigger paraphrases are the history's ``NONE`` requests and its held-out paraphrases are
  the negatives. Inner-CV groups (the fit's) are single paraphrases. Each bank intent is one class.
- **Simulator** (:mod:`skillflow.lab.simulator`): single-turn runs and multi-turn conversations
  (greeting, request, reads, confirmation, write) of the five simulator intents, segmented like
  ``record_conversation`` does. Outer 5-fold CV is grouped by **template family** (the request template,
  training and held-out templates alike), never by episode: a held-out fold's phrasings were never seen.
  Live skills are the training folds' classes that pass the configured gates, as for τ-bench.
- **API-Bank** (level-1 reference dialogs from ``../shared/corpora``, a real corpus never used to choose
  anything in the rule): each dialog is segmented on state-changing calls (tool-name verb rule) like
  ``record_conversation`` does; outer 5-fold CV is grouped by **scenario** (the file name without its
  sample number, e.g. ``AddAgenda-level-1``), never by dialog.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from skillflow.capture.segments import READ_ONLY
from skillflow.injection.embeddings import Embedder
from skillflow.injection.rule import LiveSkill
from skillflow.kernel import canonical
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import Step
from skillflow.kernel.state import changes_state
from skillflow.lab.bench.applicability_bench import (
    AppResult,
    Seg,
    Split,
    conversation_segs,
    evaluate,
    spans,
    task_folds,
)
from skillflow.lab.bench.paraphrase_bank import BANK
from skillflow.lab.ingest.api_bank import chat_messages
from skillflow.lab.simulator import conversation_messages, execute, new_task, procedures_for
from skillflow.lab.simulator.conversations import CONFIRMATIONS, GREETINGS
from skillflow.lab.simulator.scenarios import INTENT_WEIGHTS, INTENTS
from skillflow.lab.simulator.templates import HELD_OUT, TEMPLATES

BANK_ROUNDS = 5
GOOD_RATE = 0.55
API_BANK = Path("/work/shared/corpora/api-bank/level-1-given-desc")


def _seg(task: str, group: str, klass: str, text: str) -> Seg:
    return Seg(task, group, klass, klass, (klass,), (text,), (text,), True, text)


def bank_segments() -> tuple[list[Seg], list[int], list[int]]:
    """The bank as single-turn segments, with the indices of the trigger and of the held-out paraphrases."""
    segs: list[Seg] = []
    history: list[int] = []
    probes: list[int] = []
    for intent in BANK:
        for kind, phrases, into in (("t", intent.triggers, history), ("h", intent.held_out, probes)):
            for j, text in enumerate(phrases):
                into.append(len(segs))
                segs.append(_seg(intent.name, f"{intent.name}#{kind}{j}", intent.name, text))
    return segs, history, probes


def bank_splits(history: list[int], probes: list[int], rounds: int = BANK_ROUNDS) -> list[Split]:
    """Round r: every intent but BANK[r::rounds] has a live skill; history = triggers, probes = held-out."""
    out: list[Split] = []
    for r in range(rounds):
        without = {i.name for i in BANK[r::rounds]}
        skills = [LiveSkill(i.name, i.name, i.name, (i.name,), (1.0, 5.0)) for i in BANK if i.name not in without]
        out.append((history, probes, skills))
    return out


def run_bank(
    embedder: Embedder, config: PromotionConfig, threshold: float, progress: Callable[[str], None]
) -> AppResult:
    segs, history, probes = bank_segments()
    progress(f"bench bank: {len(BANK)} intents, {len(history)} history and {len(probes)} held-out paraphrases")
    return evaluate(
        segs,
        embedder,
        config,
        threshold=threshold,
        progress=progress,
        splits=bank_splits(history, probes),
        corpus=f"bench bank ({BANK_ROUNDS} rounds, every {BANK_ROUNDS}th intent without a skill)",
        declared=dict.fromkeys((i.name for i in BANK), True),  # each bank intent is one state-changing call
    )


def _family(intent: str, request: str, slots: Mapping[str, Any]) -> str:
    """The request's template family (``intent:t3`` training, ``intent:h1`` held-out)."""
    for kind, bank in (("t", TEMPLATES), ("h", HELD_OUT)):
        for j, template in enumerate(bank[intent]):
            if template.format(**slots) == request:
                return f"{intent}:{kind}{j}"
    return f"{intent}:?"


def _business_ok(steps: list[Step]) -> bool:
    """The simulator's business outcome on raw steps: no error, no declined payment, a cancel that cancelled."""
    for step in steps:
        if step.error:
            return False
        result = step.result if isinstance(step.result, Mapping) else {}
        if result.get("accepted") is False:
            return False
        if step.tool == "cancel_reservation" and result.get("status") != "cancelled":
            return False
    return True


def _unit_seg(
    task: str, group: str, steps: list[Step], span: tuple[str, ...], so_far: tuple[str, ...], index: int = 0
) -> Seg | None:
    units = canonical.signature(steps, ("think",))
    if not units:
        return None
    procedure = tuple(u.tool for u in units)
    intent = procedure[-1] if changes_state(procedure[-1]) else READ_ONLY
    key = canonical.normalize_query("\n".join(span))
    return Seg(task, group, intent, canonical.canonical_hash(units) or "", procedure, span, so_far,
               _business_ok(steps), key, index)  # fmt: skip


def simulator_segments(
    runs: int = 400, conversations: int = 150, seed: int = 7, held_out_share: float = 0.25
) -> list[Seg]:
    """Single-turn runs and conversations of the simulator as segments, each tagged with its template family."""
    rng = random.Random(f"applicability:{seed}")
    weights = [INTENT_WEIGHTS[i] for i in INTENTS]
    out: list[Seg] = []
    for index in range(runs + conversations):
        intent = rng.choices(INTENTS, weights)[0]
        task = new_task(intent, rng, held_out=rng.random() < held_out_share)
        family = _family(intent, task.request, task.slots)
        options = procedures_for(intent)
        good = next(p for p in options if p.good)
        chosen = good if rng.random() < GOOD_RATE else rng.choice([p for p in options if not p.good])
        execution = execute(chosen, task)
        if index < runs:
            seg = _unit_seg(family, f"run-{index}", list(execution.steps), (task.request,), (task.request,))
            out += [seg] if seg else []
            continue
        messages = conversation_messages(
            task.request, execution.steps, execution.answer, rng.choice(GREETINGS), rng.choice(CONFIRMATIONS)
        )
        for s, span, so_far in spans(messages):
            seg = _unit_seg(family, f"conv-{index}", s.steps, span, so_far, s.index)
            out += [seg] if seg else []
    return out


def run_simulator(
    embedder: Embedder,
    config: PromotionConfig,
    threshold: float,
    progress: Callable[[str], None],
    runs: int = 400,
    conversations: int = 150,
) -> AppResult:
    segs = simulator_segments(runs, conversations)
    families = len({s.task for s in segs})
    progress(f"simulator: {len(segs)} segments ({runs} runs, {conversations} conversations), {families} families")
    return evaluate(
        segs,
        embedder,
        config,
        threshold=threshold,
        progress=progress,
        splits=task_folds(segs, config, 5, 0),
        corpus=f"simulator ({runs} runs + {conversations} conversations, 5-fold CV grouped by template family)",
    )


def api_bank_segments(root: Path = API_BANK) -> list[Seg]:
    """Every level-1 dialog as segments, tagged with its scenario (``Seg.task``) and dialog (``Seg.conversation``)."""
    out: list[Seg] = []
    for file in sorted(root.glob("*.jsonl")):
        records = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
        out += conversation_segs(re.sub(r"-\d+$", "", file.stem), file.stem, chat_messages(records))
    return out


def run_api_bank(
    embedder: Embedder,
    config: PromotionConfig,
    threshold: float,
    progress: Callable[[str], None],
    root: Path = API_BANK,
    seed: int = 0,
) -> AppResult | None:
    """None (with a message) when the corpus folder is absent."""
    if not root.is_dir():
        progress(f"API-Bank corpus not found at {root}: skipped")
        return None
    segs = api_bank_segments(root)
    progress(f"API-Bank: {len(segs)} segments of {len({s.conversation for s in segs})} dialogs")
    return evaluate(
        segs,
        embedder,
        config,
        threshold=threshold,
        progress=progress,
        splits=task_folds(segs, config, 5, seed),
        corpus="API-Bank level-1 (5-fold CV grouped by scenario)",
    )
