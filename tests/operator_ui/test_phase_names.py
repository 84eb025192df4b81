"""The page compares the loop's phase with string literals (app.js) and styles it by class
(style.css): every phase it names must be a LoopPhase value, so a renamed phase fails here, not
silently on the page."""

from __future__ import annotations

import re
from pathlib import Path

from operator_ui.record_session import RecordPhase
from pde_contract.service_state import LOOP_MOVES_ARM, LoopPhase

STATIC = Path(__file__).resolve().parents[2] / "operator_ui" / "static"


def phases_in_app_js(text: str, holder: str = "current") -> set[str]:
    """`<holder>.phase === "x"`, `!== "x"` and `["x", "y"].includes(<holder>.phase)`: the loop's
    phase is `current.phase`, the record panel's `rec.phase` (operator_ui/record_session.py)."""
    names = set(re.findall(rf'\b{holder}\.phase\s*[!=]==\s*"([^"]*)"', text))
    for group in re.findall(rf"\[([^\]]*)\]\.includes\({holder}\.phase\)", text):
        names |= set(re.findall(r'"([^"]*)"', group))
    return names


def test_app_js_names_only_loop_phases() -> None:
    names = phases_in_app_js((STATIC / "app.js").read_text())
    assert {"awaiting_start", "running"} <= names, "the patterns above no longer find the page's checks"
    unknown = names - set(LoopPhase)
    assert not unknown, f"app.js names phases the loop never publishes: {unknown}"
    every = set(re.findall(r'phase\s*[!=]==\s*"([^"]*)"', (STATIC / "app.js").read_text()))
    assert every <= names | phases_in_app_js((STATIC / "app.js").read_text(), "rec"), (
        "app.js compares a phase the two patterns do not cover"
    )


def test_app_js_names_only_record_phases() -> None:
    names = phases_in_app_js((STATIC / "app.js").read_text(), "rec")
    assert {"ready", "recording", "recorded"} <= names, "the patterns above no longer find the panel's checks"
    unknown = names - set(RecordPhase)
    assert not unknown, f"app.js names record phases the record session never has: {unknown}"


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
