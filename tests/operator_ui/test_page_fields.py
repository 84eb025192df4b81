"""The page and its server name the same fields: every JSON endpoint has a response model (so
/api/docs shows its schema), and every field app.js reads is in one of them, so a renamed field
fails here instead of leaving a blank on the page. (Phases: test_phase_names.py.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from operator_ui.app import create_app
from operator_ui.settings import UISettings

STATIC = Path(__file__).resolve().parents[2] / "operator_ui" / "static"
# Endpoints that answer with a file, not JSON.
FILE_ENDPOINTS = {
    "/api/episodes/{episode_id}/video/{camera}",
    "/api/cameras/{name}.jpg",
    "/api/record/video/{camera}",
}
# Keys of a dict in an answer (services by name in /api/health), not fields of a model.
DICT_KEYS = {"robot_server"}


def _openapi(tmp_path: Path) -> dict[str, Any]:
    openapi: dict[str, Any] = create_app(UISettings.model_validate({"data_dir": tmp_path}), "token").openapi()
    return openapi


def fields_read_in_app_js(text: str) -> set[str]:
    """`x.snake_case` reads: the page's own names are camelCase, the server's snake_case."""
    return set(re.findall(r"\.([a-z][a-z0-9]*_[a-z0-9_]+)\b", text))


def schema_fields(openapi: dict[str, Any]) -> set[str]:
    return {name for s in openapi["components"]["schemas"].values() for name in s.get("properties", {})}


def test_every_json_endpoint_has_a_response_model(tmp_path: Path) -> None:
    """The schema of each answer is a model (a $ref), or a list of models or strings: never empty
    (no response model) nor a bare object (a hand-built dict)."""
    untyped = set()
    for path, ops in _openapi(tmp_path)["paths"].items():
        for method, op in ops.items():
            content = op["responses"].get("200", {}).get("content", {})
            schema = content.get("application/json", {}).get("schema", {})
            typed = (
                "$ref" in schema
                or ("$ref" in schema.get("items", {}))
                or schema.get("items") == {"type": "string"}
            )
            if not typed and path not in FILE_ENDPOINTS:
                untyped.add(f"{method.upper()} {path}: {schema}")
    assert not untyped, f"endpoints without a response model: {sorted(untyped)}"


def test_app_js_reads_only_fields_the_models_have(tmp_path: Path) -> None:
    openapi = _openapi(tmp_path)
    read = fields_read_in_app_js((STATIC / "app.js").read_text())
    assert {"last_start", "update_eta_s", "trained_through_episode_id"} <= read, "the pattern finds nothing"
    unknown = read - schema_fields(openapi) - DICT_KEYS
    assert not unknown, f"app.js reads fields no response model has: {unknown}"


def test_a_renamed_field_is_caught(tmp_path: Path) -> None:
    openapi = _openapi(tmp_path)
    assert fields_read_in_app_js("r.update_eta_sec + loop.last_start") - schema_fields(openapi) == {
        "update_eta_sec"
    }
