"""The page compares the store's words (an episode's status, a task's stage) with string literals
in app.js: each must be a value of its enum (pde_contract.records), so a renamed value fails here,
not silently on the page."""

from __future__ import annotations

import re
from pathlib import Path

from pde_contract.records import EpisodeStatus, Stage

APP_JS = Path(__file__).resolve().parents[2] / "operator_ui" / "static" / "app.js"


def words_compared(text: str, field: str) -> set[str]:
    """``e.status === "x"`` / ``!== "x"`` for ``field="e.status"``."""
    return set(re.findall(rf'\b{re.escape(field)}\s*[!=]==\s*"([^"]*)"', text))


def test_app_js_names_only_episode_statuses_and_stages() -> None:
    text = APP_JS.read_text()
    statuses = words_compared(text, "e.status")
    assert {"discarded", "labelled"} <= statuses, "the pattern no longer finds the page's checks"
    unknown = statuses - set(EpisodeStatus)
    assert not unknown, f"app.js names statuses no episode has: {unknown}"
    stages = words_compared(text, "t.stage")
    assert "bootstrap" in stages, "the pattern no longer finds the page's stage check"
    assert stages <= set(Stage), f"app.js names stages no task has: {stages - set(Stage)}"


def test_a_renamed_status_is_caught() -> None:
    assert words_compared('if (e.status === "labeled") {}', "e.status") - set(EpisodeStatus) == {"labeled"}
