"""Portable column types: UTC timestamps, JSON text, float32 vectors (Oracle VECTOR)."""

from __future__ import annotations

import array
import json
import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import CLOB, DateTime, LargeBinary, Text
from sqlalchemy.dialects import oracle
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in and out on every backend (Oracle ``TIMESTAMP WITH TIME ZONE``)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name == "oracle":
            return dialect.type_descriptor(oracle.TIMESTAMP(timezone=True))
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: skillflow stores timezone-aware UTC only")
        value = value.astimezone(UTC)
        # SQLite has no time zone type; store naive UTC text, re-attached on read.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, datetime):
        return obj.isoformat()
    if isinstance(obj, bytes | bytearray):
        return f"<{len(obj)} bytes>"
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    return repr(obj)


def _finite(obj: Any) -> Any:
    """Replace NaN/Infinity (not JSON) by ``None`` recursively — a documented safe coercion."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def dumps(value: Any) -> str:
    """Strict JSON text (no NaN), with safe coercion of non-JSON values to their ``repr``."""
    return json.dumps(_finite(value), default=_json_default, allow_nan=False, ensure_ascii=False, separators=(",", ":"))


class JSONText(TypeDecorator[Any]):
    """JSON stored as text (Oracle ``CLOB CHECK (col IS JSON)``); Python values in and out."""

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name == "oracle":
            return dialect.type_descriptor(CLOB())
        return dialect.type_descriptor(Text())

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else dumps(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if not isinstance(value, str):  # Oracle CLOB locators read as LOB objects
            value = value.read()
        return json.loads(value)


class Vector(TypeDecorator[np.ndarray]):
    """float32 vector: Oracle ``VECTOR(dim, FLOAT32)``, little-endian float32 bytes elsewhere."""

    impl = LargeBinary
    cache_ok = True

    def __init__(self, dim: int = 384) -> None:
        super().__init__()
        self.dim = dim

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name == "oracle":
            from sqlalchemy.dialects.oracle import VECTOR, VectorStorageFormat

            vector = VECTOR(dim=self.dim, storage_format=VectorStorageFormat.FLOAT32)  # type: ignore[no-untyped-call]  # untyped in SQLAlchemy
            return dialect.type_descriptor(vector)
        return dialect.type_descriptor(LargeBinary())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        vec = np.asarray(value, dtype="<f4").ravel()
        if dialect.name == "oracle":
            return array.array("f", vec.tolist())
        return vec.tobytes()

    def process_result_value(self, value: Any, dialect: Dialect) -> np.ndarray | None:
        if value is None:
            return None
        if isinstance(value, array.array):
            return np.asarray(value, dtype=np.float32)
        return np.frombuffer(bytes(value), dtype="<f4")
