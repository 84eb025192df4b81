"""The page compares the loop's phase with string literals (app.js) and styles it by class
(style.css): every phase it names must be a LoopPhase value, so a renamed phase fails here, not
silently on the page."""

from __future__ import annotations

import re
from pathlib import Path

from pde_contract.service_state import LOOP_MOVES_ARM, LoopPhase

STATIC = Path(__file__).resolve().parents[2] / "operator_ui" / "static"


def phases_in_app_js(text: str) -> set[str]:
    """`phase === "x"`, `phase !== "x"` and `["x", "y"].includes(current.phase)`."""
    names = set(re.findall(r'phase\s*[!=]==\s*"([^"]*)"', text))
    for group in re.findall(r"\[([^\]]*)\]\.includes\([\w.]*phase\)", text):
        names |= set(re.findall(r'"([^"]*)"', group))
    return names


def test_app_js_names_only_loop_phases() -> None:
    names = phases_in_app_js((STATIC / "app.js").read_text())
    assert {"awaiting_start", "running"} <= names, "the patterns above no longer find the page's checks"
    unknown = names - set(LoopPhase)
    assert not unknown, f"app.js names phases the loop never publishes: {unknown}"


def test_app_js_home_guard_is_the_servers() -> None:
    """The page greys out Home in the phases where the server refuses it."""
    [group] = re.findall(r"\[([^\]]*)\]\.includes\(current\.phase\)", (STATIC / "app.js").read_text())
    assert set(re.findall(r'"([^"]*)"', group)) == set(LOOP_MOVES_ARM)


def test_style_css_names_only_loop_phases() -> None:
    names = set(re.findall(r"\.phase\.(\w+)", (STATIC / "style.css").read_text()))
    assert names, "the pattern above no longer finds the phase styles"
    assert names <= set(LoopPhase), (
        f"style.css styles phases the loop never publishes: {names - set(LoopPhase)}"
    )


def test_a_renamed_phase_is_caught() -> None:
    assert phases_in_app_js('if (current.phase === "awaiting_strat") {}') - set(LoopPhase) == {
        "awaiting_strat"
    }
