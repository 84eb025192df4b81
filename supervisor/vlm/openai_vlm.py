"""The VLM over any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, ...).

Retries are ours, not the client's (``max_retries=0``): one policy that we can log, test and bound
(429, 5xx, timeouts and dropped connections are retried with exponential backoff; other 4xx are
not). The answer must be JSON matching a pydantic model; an invalid answer gets exactly one repair
request that shows the model its mistake.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import openai
from pydantic import BaseModel, ValidationError

from supervisor import prompts
from supervisor.frames import data_url
from supervisor.settings import SupervisorSettings
from supervisor.vlm.base import (
    VLM,
    CallRecord,
    CallSink,
    CandidateRequest,
    CandidateResult,
    SuccessRequest,
    SuccessResult,
    SummaryRequest,
    SummaryResult,
    VLMError,
)
from supervisor.vlm.schemas import CandidateOutput, SuccessOutput, SummaryOutput, json_schema

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)

_RETRYABLE = (
    openai.APITimeoutError,
    openai.APIConnectionError,
    openai.RateLimitError,
    openai.InternalServerError,
)


class OpenAIVLM(VLM):
    def __init__(
        self,
        settings: SupervisorSettings,
        on_call: CallSink | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(on_call)
        self.settings = settings
        self.model = settings.model
        self._sleep = sleep
        self._response_format = settings.response_format
        self.client = openai.OpenAI(
            base_url=settings.base_url,
            # vLLM ignores the key but the client insists on one.
            api_key=settings.api_key.get_secret_value() or "EMPTY",
            timeout=openai.Timeout(settings.request_timeout_s, connect=settings.connect_timeout_s),
            max_retries=0,
        )

    # --- the three questions ------------------------------------------------------------------

    def propose_prompts(self, request: CandidateRequest) -> CandidateResult:
        rendered = prompts.candidate_prompt(request, self.settings.frames_per_rollout)
        out = self._ask("candidates", rendered, CandidateOutput)
        return CandidateResult(list(out.new_prompts), dict(out.summaries), out.analysis, source="vlm")

    def summarize_rollouts(self, request: SummaryRequest) -> SummaryResult:
        out = self._ask(
            "summary", prompts.summary_prompt(request, self.settings.frames_per_rollout), SummaryOutput
        )
        return SummaryResult(out.summary)

    def judge_success(self, request: SuccessRequest) -> SuccessResult:
        out = self._ask(
            "success", prompts.success_prompt(request, self.settings.frames_per_rollout), SuccessOutput
        )
        return SuccessResult(out.success, out.reason)

    # --- request building ---------------------------------------------------------------------

    def build_messages(self, rendered: prompts.Rendered) -> list[dict[str, Any]]:
        if rendered.n_images > self.settings.max_images_per_request:
            raise VLMError(
                f"request has {rendered.n_images} images, more than max_images_per_request="
                f"{self.settings.max_images_per_request}",
                retryable=False,
            )
        content: list[dict[str, Any]] = []
        for part in rendered.parts:
            if isinstance(part, bytes):
                content.append({"type": "image_url", "image_url": {"url": data_url(part), "detail": "low"}})
            else:
                content.append({"type": "text", "text": part})
        return [{"role": "system", "content": rendered.system}, {"role": "user", "content": content}]

    def _format(self, kind: str, model: type[BaseModel]) -> dict[str, Any]:
        if self._response_format == "json_schema":
            return {
                "type": "json_schema",
                "json_schema": {"name": f"pde_{kind}", "schema": json_schema(model), "strict": False},
            }
        return {"type": "json_object"}

    # --- one question, with retries and one repair ----------------------------------------------

    def _ask(self, kind: str, rendered: prompts.Rendered, model: type[M]) -> M:
        messages = self.build_messages(rendered)
        content, record = self._complete(kind, messages, model)
        try:
            out = _parse(content, model)
        except ValueError as first:
            self._record(dataclasses.replace(record, ok=False, error=f"invalid answer: {first}"[:500]))
            log.warning("VLM %s answer invalid (%s); asking once to repair it", kind, first)
            repair = [
                *messages,
                {"role": "assistant", "content": content},
                {
                    "role": "user",
                    "content": f"That reply is not valid: {first}. Reply again with ONLY the JSON object, "
                    "exactly matching the requested keys and types.",
                },
            ]
            content, record = self._complete(f"{kind}_repair", repair, model)
            try:
                out = _parse(content, model)
            except ValueError as second:
                self._record(dataclasses.replace(record, ok=False, error=f"invalid answer: {second}"[:500]))
                raise VLMError(f"VLM {kind} answer still invalid after one repair: {second}") from second
        self._record(record)
        return out

    def _complete(
        self, kind: str, messages: list[dict[str, Any]], model: type[BaseModel]
    ) -> tuple[str, CallRecord]:
        """One chat completion under the retry policy: (content, its record), or VLMError (recorded)."""
        s = self.settings
        attempts = 0
        last_error = ""
        start = time.monotonic()
        while attempts < s.max_attempts:
            attempts += 1
            try:
                resp = self.client.chat.completions.create(  # type: ignore[call-overload]
                    model=self.model,
                    messages=messages,
                    response_format=self._format(kind.removesuffix("_repair"), model),
                    temperature=0.7 if kind.startswith("candidates") else 0.0,
                )
            except openai.BadRequestError as e:
                msg = str(e).lower()
                if self._response_format == "json_schema" and (
                    "response_format" in msg or "json_schema" in msg
                ):
                    # Servers without structured outputs: fall back to JSON mode for good.
                    log.warning("endpoint refused json_schema (%s); using json_object from now on", e)
                    self._response_format = "json_object"
                    attempts -= 1  # not the server's fault; does not count against the budget
                    continue
                last_error = _describe(e)
                break
            except _RETRYABLE as e:
                last_error = _describe(e)
                if attempts >= s.max_attempts:
                    break
                delay = self._backoff(attempts, e)
                log.warning(
                    "VLM %s attempt %d/%d failed (%s); retrying in %.2fs",
                    kind,
                    attempts,
                    s.max_attempts,
                    last_error,
                    delay,
                )
                self._sleep(delay)
                continue
            except openai.APIError as e:  # auth, not found, unprocessable: retrying will not help
                last_error = _describe(e)
                break
            usage = resp.usage
            pt = usage.prompt_tokens if usage else 0
            ct = usage.completion_tokens if usage else 0
            record = CallRecord(
                kind,
                self.model,
                pt,
                ct,
                self._cost(pt, ct),
                time.monotonic() - start,
                True,
                attempts=attempts,
            )
            content = (resp.choices[0].message.content or "") if resp.choices else ""
            return content, record
        self._record(
            CallRecord(kind, self.model, 0, 0, 0.0, time.monotonic() - start, False, last_error, attempts)
        )
        raise VLMError(f"VLM {kind} request failed after {attempts} attempt(s): {last_error}")

    def _backoff(self, attempt: int, error: Exception) -> float:
        s = self.settings
        delay = s.backoff_initial_s * (2 ** (attempt - 1))
        retry_after = _retry_after_s(error)
        if retry_after is not None:
            delay = max(delay, retry_after)
        # +-10% jitter so several supervisors do not retry in lockstep.
        return min(s.backoff_max_s, delay) * (0.9 + 0.2 * random.random())

    def _cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        s = self.settings
        return (
            prompt_tokens * s.price_input_usd_per_mtok + completion_tokens * s.price_output_usd_per_mtok
        ) / 1e6


def _parse(content: str, model: type[M]) -> M:
    text = content.strip()
    # Some servers wrap JSON in a markdown fence even in JSON mode.
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e.msg} at char {e.pos}): {content[:120]!r}") from e
    try:
        return model.model_validate(data)
    except ValidationError as e:
        errs = "; ".join(f"{'.'.join(map(str, x['loc'])) or '<root>'}: {x['msg']}" for x in e.errors()[:5])
        raise ValueError(f"JSON does not match the schema ({errs})") from e


def _retry_after_s(error: Exception) -> float | None:
    response = getattr(error, "response", None)
    if response is None:
        return None
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _describe(e: Exception) -> str:
    status = getattr(e, "status_code", None)
    name = type(e).__name__
    return f"{name} {status}" if status else f"{name}: {str(e)[:200]}"
