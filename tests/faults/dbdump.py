"""Table dumps with volatile columns normalised, so two databases can be compared row for row."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select

from skillflow.storage.schema import metadata, skillbox

SKIP_TABLES = {"schema_migrations"}
VOLATILE = {
    "created_at", "updated_at", "last_cycle_at", "expires_at", "holder", "activated_at", "demoted_at",
    "window_start", "window_end",  # a skill baseline's window: the seeding wall clock of each twin
    "evaluated_at", "last_evaluated_at",  # shadow records (JSON text, not datetimes): the drain's wall clock
}  # fmt: skip
KEEP_TIMES: set[str] = set()  # every wall-clock time differs between two seeded twins


def _norm(value: Any, skill_ids: dict[str, str]) -> Any:
    if hasattr(value, "tolist"):  # vectors (numpy arrays)
        return [round(float(x), 6) for x in value.tolist()]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, str):
        for sid, token in skill_ids.items():
            value = value.replace(sid, token)
        return value
    if isinstance(value, datetime):
        return "<time>"
    if isinstance(value, dict):
        out = {k: _norm(v, skill_ids) for k, v in sorted(value.items()) if k not in VOLATILE}
        if isinstance(out.get("recent_evaluations"), list):  # newest first by evaluation time: a wall-clock order
            out["recent_evaluations"].sort(key=lambda e: json.dumps(e, sort_keys=True, default=str))
        return out
    if isinstance(value, list | tuple):
        return [_norm(v, skill_ids) for v in value]
    return value


def dump(engine: Engine, report_fields: tuple[str, ...] = ("kind", "agent_id", "user_id", "cycle")) -> dict[str, Any]:
    """Every table as a sorted list of normalised rows (skill ids → ``<skill:hash:version>``, times → ``<time>``)."""
    out: dict[str, Any] = {}
    with engine.connect() as conn:
        skill_ids = {
            r.id: f"<skill:{r.canonical_hash[:12]}:v{r.version}>"
            for r in conn.execute(select(skillbox.c.id, skillbox.c.canonical_hash, skillbox.c.version))
        }
        for table in metadata.sorted_tables:
            if table.name in SKIP_TABLES:
                continue
            rows = []
            for row in conn.execute(select(table)).mappings():
                item: dict[str, Any] = {}
                for key, value in row.items():
                    if key in VOLATILE and table.name not in KEEP_TIMES:
                        continue
                    if table.name == "skill_events" and key == "id":
                        continue
                    if table.name == "reports" and key in ("id", "body"):
                        if key == "body":
                            item[key] = _norm({f: value.get(f) for f in report_fields}, skill_ids)
                        continue
                    if isinstance(value, datetime) and table.name in KEEP_TIMES:
                        item[key] = value.isoformat()
                    else:
                        item[key] = _norm(value, skill_ids)
                rows.append(item)
            out[table.name] = sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))
    return out
