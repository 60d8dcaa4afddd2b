"""SKILL.md in the Agent Skills format: strict parsing and deterministic rendering.

Frontmatter follows the spec's reference validator (``agentskills validate``): only the allowed top-level
keys, every value a string, block style only (strict YAML has no flow lists). Preconditions, version and
provenance live under ``metadata`` as ``precondition-1`` … and plain string keys.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import yaml

from skillflow.kernel.textnorm import safe_label
from skillflow.promotion.detectors import literal_findings
from skillflow.promotion.hijack import hijack_findings

ALLOWED_KEYS = frozenset({"name", "description", "license", "compatibility", "metadata", "allowed-tools"})
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
PRECONDITION_KEY = re.compile(r"^precondition-(\d+)$")
REQUIRED_SECTIONS = ("When to apply", "Procedure", "Failure modes observed", "Worked example")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


class SkillMdError(ValueError):
    """A SKILL.md that does not parse or violates the format; the message is the reason."""


@dataclass(frozen=True)
class ParsedSkill:
    name: str
    description: str
    allowed_tools: list[str]
    preconditions: list[str]
    metadata: dict[str, str]
    body: str
    sections: dict[str, str] = field(default_factory=dict)
    license: str | None = None
    compatibility: str | None = None


def validate_name(name: str) -> None:
    """The spec's name rule: ≤ 64 chars, lowercase letters/digits, single inner hyphens."""
    if not name:
        raise SkillMdError("name is empty")
    if len(name) > MAX_NAME:
        raise SkillMdError(f"name longer than {MAX_NAME} characters")
    if not re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", name):
        raise SkillMdError("name must be lowercase letters, digits and single hyphens")


def slugify(text: str, max_len: int = MAX_NAME) -> str:
    """A valid skill name from free text (``"Cancel a reservation!"`` → ``cancel-a-reservation``)."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    slug = slug[:max_len].rstrip("-")
    return slug or "learned-skill"


def shown_name(text: str) -> str:
    """A key or tool name as a reason may quote it: a short plain label (``[a-z0-9_-]``, 40 characters)
    that reads as neither an instruction nor a literal, else ``<name>`` (docs/SECURITY.md: reasons never
    quote untrusted text)."""
    label = safe_label(text)
    if label is None or hijack_findings(label.replace("-", " ")) or literal_findings(label.replace("_", " ")):
        return "<name>"
    return label


def _scalar(node: yaml.Node, where: str) -> str:
    if not isinstance(node, yaml.ScalarNode):
        raise SkillMdError(f"{where} must be a string (block style; no lists or mappings)")
    return str(node.value)


def _frontmatter_nodes(text: str) -> tuple[yaml.MappingNode, str]:
    if not text.startswith("---"):
        raise SkillMdError("SKILL.md must start with YAML frontmatter (---)")
    # Split exactly as the reference validator does, so both agree on where the frontmatter ends.
    parts = text.split("---", 2)
    if len(parts) < 3:
        raise SkillMdError("frontmatter is not closed with ---")
    front, body = parts[1], parts[2]
    if not front.startswith(("\n", "\r\n")) or not front.endswith("\n") or not (body == "" or body[0] in "\r\n"):
        raise SkillMdError("frontmatter delimiters must be on their own lines")
    try:
        root = yaml.compose(front, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise SkillMdError(f"invalid YAML in frontmatter ({type(exc).__name__})") from exc
    if not isinstance(root, yaml.MappingNode) or root.flow_style:
        raise SkillMdError("frontmatter must be a block-style YAML mapping")
    return root, body.strip()


def _sections(body: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in body.splitlines():
        match = _HEADING.match(line)
        if match and len(match.group(1)) == 2:
            current = match.group(2).strip()
            sections.setdefault(current, [])
        elif current is not None:
            sections[current].append(line)
    return {k: "\n".join(v).strip() for k, v in sections.items()}


def parse_skill_md(text: str) -> ParsedSkill:
    """Parse and check a SKILL.md; raises ``SkillMdError`` with the reason."""
    root, body = _frontmatter_nodes(text)
    values: dict[str, str] = {}
    metadata: dict[str, str] = {}
    for key_node, value_node in root.value:
        key = _scalar(key_node, "a frontmatter key")
        if key not in ALLOWED_KEYS:
            raise SkillMdError(f"unexpected frontmatter key: {shown_name(key)}")
        if key in values or (key == "metadata" and metadata):
            raise SkillMdError(f"duplicate frontmatter key: {key}")
        if key == "metadata":
            if not isinstance(value_node, yaml.MappingNode) or value_node.flow_style:
                raise SkillMdError("metadata must be a block-style mapping of strings")
            for mk, mv in value_node.value:
                mkey = _scalar(mk, "a metadata key")
                if not isinstance(mv, yaml.ScalarNode):  # the key is named only on this path: naming costs
                    _scalar(mv, f"metadata value of {shown_name(mkey)}")
                metadata[mkey] = str(mv.value)
            continue
        values[key] = _scalar(value_node, key).strip()
    name = values.get("name", "")
    description = values.get("description", "")
    if "name" not in values:
        raise SkillMdError("missing required field: name")
    validate_name(name)
    if not description:
        raise SkillMdError("missing required field: description")
    if len(description) > MAX_DESCRIPTION:
        raise SkillMdError(f"description longer than {MAX_DESCRIPTION} characters")
    if len(values.get("compatibility", "")) > MAX_COMPATIBILITY:
        raise SkillMdError(f"compatibility longer than {MAX_COMPATIBILITY} characters")
    numbered = sorted(
        (int(m.group(1)), v.strip()) for k, v in metadata.items() if (m := PRECONDITION_KEY.match(k)) and v.strip()
    )
    preconditions = [v for _, v in numbered]
    if not preconditions and metadata.get("preconditions", "").strip():
        preconditions = [p.strip() for p in metadata["preconditions"].split(";") if p.strip()]
    return ParsedSkill(
        name=name,
        description=description,
        allowed_tools=values.get("allowed-tools", "").split(),
        preconditions=preconditions,
        metadata=metadata,
        body=body,
        sections=_sections(body),
        license=values.get("license"),
        compatibility=values.get("compatibility"),
    )


def _quoted(value: str) -> str:
    if "---" in value:
        raise SkillMdError("frontmatter values must not contain '---'")
    return json.dumps(value, ensure_ascii=False)


def render_skill_md(
    name: str,
    description: str,
    allowed_tools: Sequence[str],
    preconditions: Sequence[str],
    metadata: Mapping[str, str],
    sections: Mapping[str, str] | Iterable[tuple[str, str]],
    title: str | None = None,
) -> str:
    """A SKILL.md that ``parse_skill_md`` and ``agentskills validate`` accept (deterministic output)."""
    validate_name(name)
    description = " ".join(description.split())
    if not description or len(description) > MAX_DESCRIPTION:
        raise SkillMdError(f"description must be 1..{MAX_DESCRIPTION} characters")
    meta: dict[str, str] = {k: str(v) for k, v in metadata.items() if not PRECONDITION_KEY.match(k)}
    for i, pre in enumerate(preconditions, start=1):
        meta[f"precondition-{i}"] = " ".join(pre.split())
    lines = ["---", f"name: {name}", f"description: {_quoted(description)}"]
    if allowed_tools:
        lines.append(f"allowed-tools: {_quoted(' '.join(allowed_tools))}")
    if meta:
        lines.append("metadata:")
        for key, value in meta.items():
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", key):
                raise SkillMdError("metadata keys must be simple identifiers")
            lines.append(f"  {key}: {_quoted(value)}")
    lines += ["---", "", f"# {title or name}", ""]
    items = sections.items() if isinstance(sections, Mapping) else sections
    for heading, content in items:
        lines += [f"## {heading}", "", content.strip(), ""]
    return "\n".join(lines)


def with_metadata(text: str, extra: Mapping[str, str]) -> str:
    """The same skill with ``extra`` merged into its metadata (provenance stamping); body unchanged."""
    parsed = parse_skill_md(text)
    return _serialise(parsed, {**parsed.metadata, **extra}, text.split("---", 2)[2].lstrip("\r\n"))


def canonical_skill_md(text: str) -> str:
    """The stored form of a SKILL.md: the frontmatter rewritten from its parsed values (comments, tags,
    anchors and escapes gone; every value quoted), the body unchanged. The pipeline's own output is a
    fixed point, so an exported skill imports byte for byte. Raises ``SkillMdError``."""
    return canonical_parse(text)[0]


def canonical_parse(text: str) -> tuple[str, ParsedSkill]:
    """:func:`canonical_skill_md` and the parsed skill (the same for the text and its canonical form)."""
    parsed = parse_skill_md(text)
    return _serialise(parsed, parsed.metadata, text.split("---", 2)[2].lstrip("\r\n")), parsed


def _serialise(parsed: ParsedSkill, merged: Mapping[str, str], body: str) -> str:
    lines = ["---", f"name: {parsed.name}", f"description: {_quoted(parsed.description)}"]
    if parsed.license:
        lines.append(f"license: {_quoted(parsed.license)}")
    if parsed.compatibility:
        lines.append(f"compatibility: {_quoted(parsed.compatibility)}")
    if parsed.allowed_tools:
        lines.append(f"allowed-tools: {_quoted(' '.join(parsed.allowed_tools))}")
    if merged:
        lines.append("metadata:")
    for key, value in merged.items():
        lines.append(f"  {_quoted(key) if not re.fullmatch(r'[A-Za-z0-9_.-]+', key) else key}: {_quoted(value)}")
    return "\n".join([*lines, "---", "", body])


_STEP_LINE = re.compile(r"^\s*(?:\d+[.)]|[-*])\s+(.*)$")


def tool_mentions(text: str, tools: Iterable[str]) -> list[str]:
    """Known tool names mentioned in ``text`` (backticked, bare or called), in order of appearance."""
    names = sorted({t for t in tools if t}, key=len, reverse=True)
    if not names:
        return []
    pattern = re.compile(r"(?<![\w.-])(" + "|".join(re.escape(n) for n in names) + r")(?![\w-])")
    return [m.group(1) for m in pattern.finditer(text)]


def procedure_tools(procedure: str, tools: Iterable[str]) -> list[str]:
    """The tool each numbered/bulleted procedure step calls (its first known tool mention), in order."""
    known = list(tools)
    order: list[str] = []
    for line in procedure.splitlines():
        match = _STEP_LINE.match(line)
        if not match:
            continue
        mentions = tool_mentions(match.group(1), known)
        if mentions:
            order.append(mentions[0])
    return order
