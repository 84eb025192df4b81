"""Shared fixtures: the MiniLM embedder is loaded once per session (a few seconds on CPU)."""

from __future__ import annotations

import pytest

from supervisor.dedup import MiniLMEmbedder


@pytest.fixture(scope="session")
def embedder() -> MiniLMEmbedder:
    e = MiniLMEmbedder()
    e.encode(["warm up"])
    return e
