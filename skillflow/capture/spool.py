"""The capture spool: normalized runs kept on disk while the database is unreachable (docs/RELIABILITY.md).

A file is written atomically (a temporary file in the spool folder, fsync, rename), so a crash or an
encoding failure never leaves a 0-byte or partial ``.json``; its name is a digest of (agent, run id),
never the caller's text, so a ``run_id`` like ``../x`` or ``/tmp/evil`` stays inside the folder. A
file that cannot be read back is moved to ``bad/`` (quarantined), never retried and never deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skillflow.kernel.models import RunInput
from skillflow.storage.types import dumps

QUARANTINE = "bad"


class SpoolFileError(ValueError):
    """A spool file that is not a spooled run (empty, cut short, not UTF-8 JSON, or the wrong shape)."""


def spool_path(spool_dir: Path, agent_id: str, run_id: str) -> Path:
    """Where the run ``run_id`` of ``agent_id`` is spooled: a digest name inside ``spool_dir``."""
    digest = hashlib.sha256(f"{agent_id}\x00{run_id}".encode("utf-8", "surrogatepass")).hexdigest()
    return spool_dir / f"{digest[:40]}.json"


def _iso(value: Any) -> Any:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    return value


def to_document(run: RunInput) -> dict[str, Any]:
    """The JSON document of a normalized run (what :func:`read_spooled` gives back)."""
    return {
        "query": run.query,
        "agent_id": run.agent_id,
        "user_id": run.user_id,
        "steps": [s.__dict__ | {"timestamp": _iso(s.timestamp)} for s in run.steps],
        "skills_activated": list(run.skills_activated),
        "execution_error": run.execution_error,
        "run_id": run.run_id,
        "created_at": _iso(run.created_at),
        "metadata": run.metadata,
        "conversation_id": run.conversation_id,
        "segment_index": run.segment_index,
    }


def write_spooled(spool_dir: Path, run: RunInput, extra: Mapping[str, Any] | None = None) -> Path:
    """Write a normalized run atomically; raises ``OSError`` (disk) or ``ValueError`` (unencodable text).

    ``extra`` keys (e.g. the outcome of the conversation the run belongs to) are kept beside the run's."""
    assert run.run_id is not None
    data = dumps({**to_document(run), **(extra or {})}).encode("utf-8")
    spool_dir.mkdir(parents=True, exist_ok=True)
    path = spool_path(spool_dir, run.agent_id, run.run_id)
    fd, tmp = tempfile.mkstemp(dir=spool_dir, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(spool_dir)
    return path


def _fsync_dir(folder: Path) -> None:
    # The rename is durable once the folder's entry is on disk (not every platform can open a folder).
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def pending(spool_dir: Path) -> list[Path]:
    """The spooled files waiting for replay, oldest name first (temporary and quarantined files excluded)."""
    if not spool_dir.is_dir():
        return []
    return sorted(p for p in spool_dir.glob("*.json") if p.is_file())


def read_spooled(path: Path) -> dict[str, Any]:
    """A spooled run's document, ``created_at`` parsed; :class:`SpoolFileError` when it is not one."""
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise SpoolFileError(f"unreadable spool file: {type(exc).__name__}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("agent_id"), str):
        raise SpoolFileError("a spool file holds one run object with an agent_id")
    if not isinstance(doc.get("run_id"), str) or not doc["run_id"]:
        raise SpoolFileError("a spooled run has a run_id")
    created = doc.get("created_at")
    if created is not None:
        if not isinstance(created, str):
            raise SpoolFileError("created_at is not text")
        try:
            doc["created_at"] = datetime.fromisoformat(created)
        except ValueError:
            raise SpoolFileError("created_at is not ISO-8601") from None
    return doc


def quarantine(path: Path) -> Path | None:
    """Move ``path`` into ``bad/`` beside it (kept for inspection); None when it cannot be moved."""
    target = path.parent / QUARANTINE / path.name
    try:
        target.parent.mkdir(exist_ok=True)
        os.replace(path, target)
    except OSError:
        return None
    return target
