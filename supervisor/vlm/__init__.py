"""VLM boundary: ``base.VLM`` and its OpenAI-compatible implementation."""

from supervisor.vlm.base import VLM, CallRecord, VLMError

__all__ = ["VLM", "CallRecord", "VLMError"]
