"""What the VLM must answer, as strict pydantic models; their JSON schemas go in the request."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, StringConstraints, field_validator

PromptText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=3, max_length=200)]
OneLine = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=400)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CandidateOutput(_Strict):
    new_prompts: list[PromptText]
    summaries: dict[str, OneLine]
    analysis: Annotated[str, StringConstraints(strip_whitespace=True, max_length=4000)]

    @field_validator("new_prompts")
    @classmethod
    def _non_empty(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("new_prompts is empty: propose at least one prompt")
        return v


class SummaryOutput(_Strict):
    summary: OneLine


class SuccessOutput(_Strict):
    success: bool
    reason: OneLine


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's schema with ``additionalProperties: false`` where pydantic left it implicit."""
    schema = model.model_json_schema()
    schema.setdefault("additionalProperties", False)
    return schema
