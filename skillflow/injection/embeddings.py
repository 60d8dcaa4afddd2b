"""Embedders behind one protocol: local MiniLM (default), hashing (dependency-free), OpenAI.

Every vector is unit-normalized float32 and stored with its ``model_id``; vectors of different models
are never compared.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from skillflow.injection.minilm import MiniLMEncoder

_TOKEN = re.compile(r"[a-z0-9]+")


@runtime_checkable
class Embedder(Protocol):
    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-normalized float32 matrix, one row per text."""
        ...


def _normalize(mat: np.ndarray) -> np.ndarray:
    mat = np.asarray(mat, dtype=np.float32)
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: np.ndarray = mat / norms
    return out


class HashingEmbedder:
    """Word and character n-gram feature hashing (384-d): no model, microseconds per text."""

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        self.model_id = f"hashing-ngrams-v1-{dim}"

    def _features(self, text: str) -> list[str]:
        words = _TOKEN.findall(text.lower())
        feats = [f"w:{w}" for w in words]
        feats += [f"b:{a}_{b}" for a, b in itertools.pairwise(words)]
        for w in words:
            padded = f"<{w}>"
            feats += [f"c:{padded[i : i + 3]}" for i in range(max(1, len(padded) - 2))]
        return feats

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feat in self._features(text):
                idx, sign = _slot(feat, self.dim)
                out[row, idx] += sign * (2.0 if feat.startswith("w:") else 1.0)
        return _normalize(out)


@lru_cache(maxsize=1 << 16)
def _slot(feat: str, dim: int) -> tuple[int, float]:
    """The hashed index and sign of one feature (cached: a request's n-grams mostly repeat earlier ones)."""
    digest = hashlib.blake2b(feat.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest[:4], "little") % dim, (1.0 if digest[4] & 1 else -1.0)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 run in numpy (:mod:`skillflow.injection.minilm`): no torch, no process-wide setting.

    The weights load on the first ``embed`` (a ``prepare`` for a tenant without a live skill never embeds).
    Vectors equal sentence-transformers' within 1e-5, so stored vectors keep this ``model_id``.
    """

    model_id = "sentence-transformers/all-MiniLM-L6-v2"
    dim = 384

    def __init__(self) -> None:
        self._encoder: MiniLMEncoder | None = None
        self._lock = threading.Lock()

    def _load(self) -> MiniLMEncoder:
        with self._lock:
            if self._encoder is None:
                from skillflow.injection.minilm import MiniLMEncoder

                self._encoder = MiniLMEncoder()
            return self._encoder

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._load().encode(list(texts))


class OpenAIEmbedder:
    """OpenAI (or compatible) embeddings through the official SDK."""

    def __init__(self, model: str = "text-embedding-3-small", dim: int = 1536, client: Any = None) -> None:
        self.model = model
        self.dim = dim
        self.model_id = f"openai/{model}"
        self._client = client

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self._client is None:
            from openai import OpenAI

            self._client = OpenAI()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        resp = self._client.embeddings.create(model=self.model, input=list(texts))
        return _normalize(np.asarray([d.embedding for d in resp.data], dtype=np.float32))


@lru_cache(maxsize=4)
def get_embedder(name: str = "minilm") -> Embedder:
    """A process-wide embedder by setting name (``minilm`` | ``hashing`` | ``openai``)."""
    if name == "minilm":
        return MiniLMEmbedder()
    if name == "hashing":
        return HashingEmbedder()
    if name == "openai":
        return OpenAIEmbedder()
    raise ValueError(f"unknown embedder {name!r}; expected minilm, hashing or openai")
