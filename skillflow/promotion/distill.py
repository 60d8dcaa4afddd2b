"""Distillation: a class's evidence becomes one SKILL.md or INSUFFICIENT, behind the ``Distiller`` protocol.

``OfflineDistiller`` is the embedded default: deterministic, no network, and it only ever writes shapes
(``<id>``, ``<date>`` …), tool names, argument key names and error classes — never a source value. A key
is written only when it is a structural name (:func:`skillflow.promotion.redact.structural_names`): a key is
run data an attacker can reach, so a procedure whose own keys are not plain parameter names is
INSUFFICIENT, and any other key is shown as ``<key>`` (docs/SECURITY.md).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from skillflow.kernel import canonical
from skillflow.kernel.models import EvidenceRun
from skillflow.promotion.evidence import Evidence
from skillflow.promotion.judge import failure_error_classes
from skillflow.promotion.redact import (
    redact_text,
    safe_key,
    shape_of,
    source_literals,
    structural_names,
    structure_of,
)
from skillflow.promotion.skillmd import SkillMdError, render_skill_md, slugify

if TYPE_CHECKING:
    pass

INSUFFICIENT = "INSUFFICIENT"
OFFLINE_PROMPT_VERSION = "offline-v1"
MAX_NAME_WORDS = 3
MAX_PRECONDITIONS = 6
_WORD = re.compile(r"[a-z]+")
_PLACEHOLDER = re.compile(r"<[a-z ]+>")
_CAPITALIZED = re.compile(r"(?<=[\w,;:] )[A-Z][a-z]+\b")
_FILLER_TEXT = (
    "a an the i im i'm me my mine we our us you your yours he she it its they them their is are was were "
    "be been am do does did can could would should will shall may might must please hi hello hey thanks "
    "thank ok okay want wants wanted need needs like help to of in on at by for from with about as and or "
    "but so if then than this that these those there here what which who whom when where why how id "
    "number name code some any all just also really very get got have has had make made let know tell "
    "give given go going yes no not dont today tomorrow now soon again still already one two three s t d "
    "ll ve re m user users customer account because since "
)
FILLER = frozenset(_FILLER_TEXT.split())


@dataclass(frozen=True)
class DistillOutcome:
    skill_md: str | None
    insufficient: bool
    distiller: str
    prompt_version: str
    reasons: list[str] = field(default_factory=list)


class Distiller(Protocol):
    name: str
    prompt_version: str

    def distill(self, evidence: Evidence, max_chars: int) -> DistillOutcome:
        """One SKILL.md for the class, or ``insufficient=True`` with reasons."""
        ...


def provenance(evidence: Evidence, distiller: str, prompt_version: str) -> dict[str, str]:
    """Metadata every learned skill carries (strings, as the spec requires)."""
    return {
        "source": "learned",
        "version": str(evidence.version),
        "canonical-hash": evidence.stats.canonical_hash,
        "distiller": distiller,
        "prompt-version": prompt_version,
    }


LOOKUP_VERBS = frozenset({"get", "search", "list", "find", "lookup", "fetch", "read", "calculate", "check", "think"})
GENERIC_TOOL_TOKENS = frozenset({"get", "details", "to", "info", "data", "by", "for", "of"})
VERB_PHRASES = {"get": "look up", "lookup": "look up", "fetch": "look up", "read": "look up", "list": "list"}


def main_tool(tools: list[str]) -> str:
    """The tool that carries the intent: the last one that changes something, else the last lookup."""
    for tool in reversed(tools):
        if tool.lower().split("_")[0] not in LOOKUP_VERBS:
            return tool
    return tools[-1]


def _intent_words(queries: list[str], tools: list[str], literals: set[str]) -> list[str]:
    """Words naming the intent: query words shared by at least half the requests that also name a tool
    (``cancel``, ``reservation``); when fewer than two, the words of the main tool's name."""
    lowered_literals = {lit.casefold() for lit in literals}
    tool_tokens = {tok for t in tools for tok in t.lower().split("_")} - GENERIC_TOOL_TOKENS
    docs = [_WORD.findall(_PLACEHOLDER.sub(" ", q.lower())) for q in queries]
    df: Counter[str] = Counter()
    positions: dict[str, list[float]] = {}
    for words in docs:
        for i, w in enumerate(words):
            if w in tool_tokens and w not in FILLER and w not in lowered_literals:
                positions.setdefault(w, []).append(i / max(1, len(words)))
        df.update({w for w in words if w in positions})
    floor = max(1, math.ceil(len(docs) / 2))
    chosen = [w for w, n in sorted(df.items(), key=lambda x: (-x[1], x[0])) if n >= floor][:MAX_NAME_WORDS]
    chosen.sort(key=lambda w: sum(positions[w]) / len(positions[w]))
    if len(chosen) < 2 and tools:
        tokens = [t for t in main_tool(tools).lower().split("_") if t and t not in lowered_literals]
        chosen = [t for t in tokens if t not in GENERIC_TOOL_TOKENS or t == tokens[0]][: MAX_NAME_WORDS + 1]
    return chosen


def _phrase(words: list[str], tools: list[str]) -> str:
    verbs = {t.lower().split("_")[0] for t in tools}
    if len(words) >= 2 and words[0] in verbs:
        verb = VERB_PHRASES.get(words[0], words[0])
        return f"to {verb} a {' '.join(words[1:])}"
    return f"about {' '.join(words)}" if words else "about this procedure"


def _arg_shapes(runs: list[EvidenceRun]) -> dict[tuple[str, str], str]:
    """Most common shape of every (tool, argument key) over the successful runs."""
    counts: dict[tuple[str, str], Counter[str]] = {}
    for run in runs:
        for step in run.steps:
            args = step.get("arguments")
            if isinstance(args, dict):
                for key, value in args.items():
                    counts.setdefault((str(step.get("tool")), str(key)), Counter())[shape_of(value)] += 1
    return {k: c.most_common(1)[0][0] for k, c in counts.items()}


def _user_supplied(runs: list[EvidenceRun], tool: str, key: str) -> bool:
    for run in runs:
        for step in run.steps:
            args = step.get("arguments")
            if step.get("tool") == tool and isinstance(args, dict) and isinstance(args.get(key), str | int):
                value = str(args[key]).strip()
                if len(value) >= 3 and value.casefold() in (run.query or "").casefold():
                    return True
    return False


def _example_request(run: EvidenceRun, literals: set[str]) -> str:
    """The redacted query as the worked example quotes it, each ``"`` in it written ``'``: a query cannot close the
    quote and read as the skill's own text (docs/SECURITY.md, "Attacks tried"). Not ``\\"``: a rendered page
    shows that as ``"``, and the checks would read ``word\\`` as a quoted value."""
    text = " ".join(redact_text(run.query, literals).split()).replace('"', "'")
    text = _CAPITALIZED.sub("<name>", text)
    if len(text) <= 160:
        return text
    cut = text[:157]
    opened = cut.rfind("<")
    if opened > cut.rfind(">"):  # never half a placeholder: '<strin' would read as a quoted value
        cut = cut[:opened]
    return cut.rstrip() + "..."


def _signature_tools(run: EvidenceRun) -> list[str]:
    steps = canonical.steps_from_document({"steps": run.steps})
    return [u.tool for u in canonical.signature(steps) if not u.errored]


class OfflineDistiller:
    """Deterministic SKILL.md from the evidence: intent from queries, shapes from arguments, failure modes."""

    name = "offline"
    prompt_version = OFFLINE_PROMPT_VERSION

    def distill(self, evidence: Evidence, max_chars: int) -> DistillOutcome:
        def insufficient(*reasons: str) -> DistillOutcome:
            return DistillOutcome(None, True, self.name, self.prompt_version, list(reasons))

        units = [u for u in evidence.signature if not u.get("errored")]
        tools = [str(u["tool"]) for u in units]
        if not evidence.successes:
            return insufficient("no successful runs in the evidence")
        if not units:
            return insufficient("empty signature")
        if evidence.stats.failures > evidence.stats.successes:
            return insufficient("evidence contradicts: more failures than successes")
        if any(_signature_tools(r) != tools for r in evidence.successes):
            return insufficient("evidence contradicts: sample runs do not follow the class signature")
        names = structural_names(evidence)
        if any(str(k) not in names for u in units for k in u.get("arg_keys", [])):
            return insufficient("an argument key of the procedure is not a plain parameter name")
        literals = source_literals(evidence)
        shapes = _arg_shapes(evidence.successes)
        preconditions: list[str] = []
        seen: set[str] = set()
        for unit in units:
            for key in unit.get("arg_keys", []):
                if key in seen or len(preconditions) >= MAX_PRECONDITIONS:
                    continue
                seen.add(key)
                shape = shapes.get((str(unit["tool"]), key), "<value>")
                if _user_supplied(evidence.successes, str(unit["tool"]), key):
                    preconditions.append(f"the user has given a {shape} for `{key}`")
                else:
                    preconditions.append(f"a {shape} for `{key}` is known from the conversation or an earlier result")
        if not preconditions:
            return insufficient("no checkable precondition can be stated")
        words = _intent_words([redact_text(r.query, literals) for r in evidence.successes], tools, literals)
        name = slugify("-".join(words))
        phrase = _phrase(words, tools)
        description = (
            f"Use when the user asks {phrase} and every precondition holds; "
            "not for other intents, near misses or partial matches."
        )
        sections = self._sections(evidence, units, shapes, preconditions, phrase, literals, names)
        meta = provenance(evidence, self.name, self.prompt_version)
        try:
            text = render_skill_md(name, description, tools_unique(tools), preconditions, meta, sections)
            if len(text) > max_chars:
                sections["Worked example"] = "Omitted to fit the size cap."
                text = render_skill_md(name, description, tools_unique(tools), preconditions, meta, sections)
        except SkillMdError as exc:
            return insufficient(f"cannot render a valid SKILL.md ({exc})")
        if len(text) > max_chars:
            return insufficient(f"skill does not fit in {max_chars} characters")
        return DistillOutcome(text, False, self.name, self.prompt_version, [])

    def _sections(
        self,
        evidence: Evidence,
        units: list[dict[str, Any]],
        shapes: dict[tuple[str, str], str],
        preconditions: list[str],
        phrase: str,
        literals: set[str],
        names: set[str],
    ) -> dict[str, str]:
        when = "\n".join(
            [
                f"- The user asks {phrase}.",
                *(f"- Precondition: {p}." for p in preconditions),
                "",
                "**When NOT to apply:** the request is a different intent or only a near miss, or a precondition "
                "cannot be confirmed. Never force this procedure onto a partial match; system policy, current "
                "facts and tool results always win.",
            ]
        )
        steps = []
        for i, unit in enumerate(units, start=1):
            tool = str(unit["tool"])
            args = ", ".join(f"`{k}`: {shapes.get((tool, k), '<value>')}" for k in unit.get("arg_keys", []))
            steps.append(f"{i}. Call `{tool}` with {args}." if args else f"{i}. Call `{tool}` with no arguments.")
        steps.append("")
        steps.append("Check each result before the next step; stop and ask the user when it contradicts the request.")
        declared = set(tools_unique([str(u["tool"]) for u in units]))
        failures = []
        for cls, raised_by in sorted(failure_error_classes(evidence).items()):
            where = ", ".join(f"`{t}`" for t in sorted(raised_by & declared)) or "a tool outside this procedure"
            failures.append(
                f"- {where} failed with `{cls}`: do not retry blindly; re-check the arguments with the user."
            )
        business = [r for r in evidence.failures if not any(s.get("error") or s.get("error_class") for s in r.steps)]
        if business:
            failures.append(
                f"- {len(business)} sampled run(s) followed this path without a tool error but missed the business "
                "outcome: confirm every precondition and the user's explicit consent before the final step."
            )
        if evidence.previous_demotion_reason:
            reason = redact_text(evidence.previous_demotion_reason, literals, patterns=False)
            failures.append(
                f"- History: version {evidence.version - 1} was demoted ({reason}); verify the outcome after "
                "the final step."
            )
        # The newest success that carries a request: a write made again with no new user message is stored
        # with an empty one, which shows nothing of what the procedure answers.
        example_run = max(evidence.successes, key=lambda r: (bool((r.query or "").strip()), r.created_at))
        example = [f'Request (redacted): "{_example_request(example_run, literals)}"', ""]
        shown_steps = [s for s in example_run.steps if s.get("tool") in declared]
        for i, step in enumerate(shown_steps, start=1):
            arguments = step.get("arguments")
            shown = (
                ", ".join(f"{safe_key(k, names)}={shape_of(v)}" for k, v in arguments.items())
                if isinstance(arguments, dict)
                else shape_of(arguments)
            )
            example.append(f"{i}. `{step.get('tool')}`({shown}) → {_result_shape(step)}")
        return {
            "When to apply": when,
            "Procedure": "\n".join(steps),
            "Failure modes observed": "\n".join(failures) or "None observed in the sampled runs.",
            "Worked example": "\n".join(example),
        }


def _result_shape(step: dict[str, Any]) -> str:
    if step.get("error") or step.get("error_class"):
        return "error"
    result = structure_of(step.get("result"))
    if isinstance(result, dict):
        return "<object>"
    if isinstance(result, list):
        return "<list>"
    return str(result)


def tools_unique(tools: list[str]) -> list[str]:
    """Tools in first-use order, each once (the ``allowed-tools`` list)."""
    return list(dict.fromkeys(tools))
