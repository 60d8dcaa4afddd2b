"""The capture spool: normalized runs kept on disk while the database is unreachable (docs/RELIABILITY.md).

A file is written atomically (a temporary file in the spool folder, fsync, then a new name), so a crash or an
encoding failure never leaves a 0-byte or partial ``.json``; its name is a digest of (agent, run id), never the
caller's text, so a ``run_id`` like ``../x`` or ``/tmp/evil`` stays inside the folder. The name also holds the
time it was spooled and a random part, and it is never one that exists: two runs spooled under one run id (two
users' request ids, one user's run recorded twice, two processes at once) are two files, replayed in the order
they were spooled, so the replay ends in the rows a direct write of the same calls would have stored
(docs/guide/runtime.md, "The spool, and when the database does not answer"). A file that cannot be read back is
moved to ``bad/`` (quarantined), never retried and never deleted. A temporary file older than
:data:`ABANDONED_AFTER_SECONDS` is a write cut short (its process was killed) and is removed by a replay.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from skillflow.kernel.models import RunInput
from skillflow.storage.types import dumps

QUARANTINE = "bad"
ABANDONED_AFTER_SECONDS = 3600.0
"""A temporary file this old is a write cut short, never one in progress (a write takes well under a second)."""

# <digest of (agent, run id)>-<position: when spooled>-<random>.json; the release before wrote <digest>.json.
_NAME = re.compile(r"(?P<digest>[0-9a-f]{40})(?:-(?P<position>[0-9]{1,24})-(?P<nonce>[0-9a-f]{1,32}))?\.json")
_TEMPORARY = re.compile(r"\.[A-Za-z0-9_]{1,64}\.tmp")  # tempfile.mkstemp(prefix=".", suffix=".tmp")
# A file system without hard links (FAT, some network shares): the new name is then unique by its random part.
_NO_HARD_LINKS = frozenset(
    {errno.EPERM, errno.EACCES, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK}
)


class SpoolFileError(ValueError):
    """A spool file that is not a spooled run (empty, cut short, not UTF-8 JSON, or the wrong shape)."""


class ReplayResult(int):
    """What one ``Skillflow.replay_spool()`` did: an ``int``, the runs it stored, with the other files counted.

    ``already_stored``: files whose run id's row was there already, for the same agent and user (another replay
    stored that run, or an earlier run spooled under the same id was stored first: a direct write answers the
    later one ``already_stored`` and writes nothing); removed, not counted as stored. ``quarantined``: files
    moved to ``bad/`` (unreadable, or refused as a direct write refuses them, e.g. a run id another user
    holds). ``removed_temporary``: abandoned temporary files removed (writes cut short by a killed process).
    """

    already_stored: int
    quarantined: int
    removed_temporary: int

    def __new__(
        cls, stored: int = 0, *, already_stored: int = 0, quarantined: int = 0, removed_temporary: int = 0
    ) -> Self:
        result = super().__new__(cls, stored)
        result.already_stored = already_stored
        result.quarantined = quarantined
        result.removed_temporary = removed_temporary
        return result

    @property
    def stored(self) -> int:
        """The runs this call stored (the ``int`` value)."""
        return int(self)


def _digest(agent_id: str, run_id: str) -> str:
    return hashlib.sha256(f"{agent_id}\x00{run_id}".encode("utf-8", "surrogatepass")).hexdigest()[:40]


def order(path: Path) -> tuple[int, str, str]:
    """(position, run id group, random part) of a spool file: files sort in the order they were spooled.

    The group is the digest of (agent, run id); a file of the release before (``<digest>.json``) has position -1,
    before every later one; a name of another form is a group of its own, also at -1."""
    match = _NAME.fullmatch(path.name)
    if match is None:
        return (-1, path.name, "")
    position = match["position"]
    return (-1 if position is None else int(position), match["digest"], match["nonce"] or "")


def group(path: Path) -> str:
    """The (agent, run id) group of a spool file (see :func:`order`)."""
    return order(path)[1]


_last_position = 0


def _next_position() -> int:
    """The position of the file being named: the wall clock in nanoseconds, after every position this process
    took (a clock set back never puts a later call first). Across processes the wall clock orders the calls;
    two at the same moment differ by their random part, in either order, as their direct writes could have
    committed."""
    global _last_position
    _last_position = max(time.time_ns(), _last_position + 1)
    return _last_position


def absolute_folder(folder: Path) -> Path:
    """``folder`` made absolute against the current directory now (docs/guide/runtime.md, "The spool"): a handle
    writes and replays one folder wherever the agent moves later. Kept as given when the current directory is
    gone (the folder cannot be named; a write there fails and says so)."""
    try:
        return folder.absolute()
    except OSError:
        return folder


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

    ``extra`` keys (e.g. the outcome of the conversation the run belongs to) are kept beside the run's.
    Never replaces a file: a run spooled under a run id already in the spool is a new file, after the others
    of that run id (docs/guide/runtime.md, "The spool, and when the database does not answer")."""
    assert run.run_id is not None
    data = dumps({**to_document(run), **(extra or {})}).encode("utf-8")
    spool_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=spool_dir, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        path = _publish(tmp, spool_dir, _digest(run.agent_id, run.run_id))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(spool_dir)
    return path


def _publish(tmp: str, spool_dir: Path, digest: str) -> Path:
    """Give the written temporary file its spool name (:func:`_next_position`: after the files already there).

    ``os.link`` fails on a name that exists, so a file is never replaced, whoever writes at once."""
    for _ in range(100):
        path = spool_dir / f"{digest}-{_next_position():020d}-{secrets.token_hex(8)}.json"
        try:
            os.link(tmp, path)
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
            os.replace(tmp, path)  # no hard links here: the random part keeps the name unused
            return path
        with contextlib.suppress(OSError):  # left behind, it is removed as abandoned (the run is spooled)
            os.unlink(tmp)
        return path
    raise FileExistsError(errno.EEXIST, "no unused spool file name", str(spool_dir))


def _fsync_dir(folder: Path) -> None:
    # The rename is durable once the folder's entry is on disk (not every platform can open a folder).
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def pending(spool_dir: Path) -> list[Path]:
    """The spooled files waiting for replay (temporary and quarantined files excluded), in the order they were
    spooled (:func:`order`)."""
    if not spool_dir.is_dir():
        return []
    return sorted((p for p in spool_dir.glob("*.json") if p.is_file()), key=order)


def remove_abandoned(spool_dir: Path, older_than: float = ABANDONED_AFTER_SECONDS) -> int:
    """Remove the temporary files of spool writes cut short (a process killed while writing; no ``.json`` was
    made), those last modified more than ``older_than`` seconds ago, so a write in progress is never touched.

    Returns how many this call removed (another replay may remove some at the same time). Never raises."""
    cutoff = time.time() - older_than
    removed = 0
    try:
        with os.scandir(spool_dir) as entries:
            for entry in entries:
                if _TEMPORARY.fullmatch(entry.name) is None:
                    continue
                try:
                    if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)
                        removed += 1
                except OSError:  # removed meanwhile by another replay, or not ours to remove
                    continue
    except OSError:  # no spool folder (nothing was ever spooled), or it cannot be read
        return removed
    return removed


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
