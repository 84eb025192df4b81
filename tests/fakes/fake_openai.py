"""FakeOpenAIServer: a scripted stand-in for a hosted VLM, speaking the chat-completions API.

A hosted VLM cannot run in CI, so the boundary is faked here and only here: the real ``openai``
client talks HTTP to this server. Each request is checked (model, messages, JPEG data-URL images,
a response_format with a JSON schema or JSON mode) and answered from a script; a request that fails
the checks gets HTTP 400 with the reason, and every request is logged for the tests to inspect.

Script: a JSON list of steps used in order for every request, or a mapping from request kind
(``candidates``, ``summary``, ``success``: taken from the json_schema name ``pde_<kind>``) to such a
list, with ``"*"`` for any kind. When a list runs out the server answers ``auto``. Steps:

    {"auto": true}                       a valid answer for the kind
    {"content": "<text>"}                this exact message content
    {"malformed": true}                  content that is not JSON
    {"invalid": true}                    JSON that does not match the schema
    {"status": 429, "retry_after_s": 0}  an error status (429, 500, 503, ...)
    {"delay_s": 5, ...}                  sleep first (client timeouts), then the rest of the step
    {"reject_json_schema": true}         400 "response_format json_schema is not supported"
    {"success": false}                   for kind success: the verdict to give (auto otherwise)

As a process: ``python tests/fakes/fake_openai.py --port N [--script FILE]``; it serves until
killed. ``GET /_requests`` returns the log, ``POST /_script`` replaces the script,
``GET /healthz`` answers ok.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_VERBS = ["place", "move", "set", "transfer", "carry", "bring"]
_SUFFIXES = ["", " carefully", " with the gripper", " from above", " slowly", " and release it"]


class FakeOpenAIServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, script: Any = None) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.requests: list[dict[str, Any]] = []
        self._counter = itertools.count()
        self._prompt_counter = itertools.count()
        self.set_script(script if script is not None else [])
        self._httpd = ThreadingHTTPServer((host, port), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAIServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes handlers sleeping in a delay step
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- script -----------------------------------------------------------------------------------

    def set_script(self, script: Any) -> None:
        with self._lock:
            if isinstance(script, list):
                self._script: dict[str, list[dict[str, Any]]] = {"*": list(script)}
            elif isinstance(script, dict):
                self._script = {k: list(v) for k, v in script.items()}
            else:
                raise ValueError(f"script must be a list of steps or a mapping kind -> steps, got {script!r}")

    def _next_step(self, kind: str) -> dict[str, Any]:
        with self._lock:
            for key in (kind, "*"):
                steps = self._script.get(key)
                if steps:
                    return steps.pop(0)
        return {"auto": True}

    def requests_of(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if r["kind"] == kind]

    # --- one request ------------------------------------------------------------------------------

    def handle(self, body: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
        """(status, JSON body, extra headers) for one chat-completions request."""
        try:
            req = json.loads(body)
        except json.JSONDecodeError as e:
            return 400, _error(f"request body is not JSON: {e}"), {}
        info = inspect_request(req)
        step = self._next_step(info["kind"])
        info["step"] = step
        with self._lock:
            self.requests.append(info)
        if info["problems"]:
            return 400, _error("; ".join(info["problems"])), {}
        if step.get("delay_s"):
            self._stop.wait(float(step["delay_s"]))
        if step.get("reject_json_schema") and info["response_format"] == "json_schema":
            return 400, _error("response_format json_schema is not supported by this server"), {}
        if "status" in step:
            headers = {}
            if "retry_after_s" in step:
                headers["retry-after"] = str(step["retry_after_s"])
            return int(step["status"]), _error(f"scripted status {step['status']}"), headers
        if "content" in step:
            content = str(step["content"])
        elif step.get("malformed"):
            content = '{"new_prompts": ["unterminated'
        elif step.get("invalid"):
            content = json.dumps({"unexpected": "shape"})
        else:
            content = self._auto(info, step)
        n = next(self._counter)
        return (
            200,
            {
                "id": f"chatcmpl-fake-{n}",
                "object": "chat.completion",
                "created": 0,
                "model": req.get("model", ""),
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": content},
                    }
                ],
                "usage": {
                    "prompt_tokens": info["prompt_tokens"],
                    "completion_tokens": max(1, len(content) // 4),
                    "total_tokens": info["prompt_tokens"] + max(1, len(content) // 4),
                },
            },
            {},
        )

    def _auto(self, info: dict[str, Any], step: dict[str, Any]) -> str:
        kind = info["kind"]
        goal = info["goal"] or "do the task"
        n = next(self._counter)
        if kind == "summary":
            return json.dumps(
                {"summary": f"The robot reached for the object and stopped near the target (#{n})."}
            )
        if kind == "success":
            verdict = bool(step.get("success", True))
            return json.dumps(
                {"success": verdict, "reason": f"final frame {'shows' if verdict else 'lacks'} it"}
            )
        words = goal.split()
        rest = " ".join(words[1:]) if len(words) > 1 else goal
        prompts = []
        for _ in range(max(1, info["n_new"])):
            # A fresh (verb, suffix) pair each time: distinct wordings for 36 prompts.
            i = next(self._prompt_counter)
            verb, suffix = _VERBS[i % len(_VERBS)], _SUFFIXES[(i // len(_VERBS)) % len(_SUFFIXES)]
            prompts.append(f"{verb} {rest}{suffix}")
        return json.dumps(
            {
                "new_prompts": prompts,
                "summaries": {goal: "the robot tries the task"},
                "analysis": "fake analysis",
            }
        )


def inspect_request(req: dict[str, Any]) -> dict[str, Any]:
    """What the tests check about a request: kind, images, response format, and any problem."""
    problems: list[str] = []
    if not req.get("model"):
        problems.append("model is missing")
    messages = req.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("messages must be a non-empty list")
        messages = []
    texts: list[str] = []
    n_images = 0
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for part in content:
                if part.get("type") == "text":
                    texts.append(str(part.get("text", "")))
                elif part.get("type") == "image_url":
                    url = str(part.get("image_url", {}).get("url", ""))
                    if not url.startswith("data:image/jpeg;base64,"):
                        problems.append(f"image is not a JPEG data URL: {url[:40]!r}")
                        continue
                    raw = base64.b64decode(url.split(",", 1)[1], validate=True)
                    if raw[:2] != b"\xff\xd8":
                        problems.append("image data is not a JPEG")
                    n_images += 1
    rf = req.get("response_format") or {}
    rf_type = rf.get("type", "")
    kind = "unknown"
    if rf_type == "json_schema":
        js = rf.get("json_schema") or {}
        if not isinstance(js.get("schema"), dict) or not js["schema"].get("properties"):
            problems.append("response_format json_schema has no schema")
        kind = str(js.get("name", "")).removeprefix("pde_") or "unknown"
    elif rf_type != "json_object":
        problems.append(f"response_format must be json_schema or json_object, got {rf_type or 'none'!r}")
    text = "\n".join(texts)
    if kind == "unknown":  # JSON mode carries no schema name: infer the kind from the prompt
        kind = "candidates" if '"new_prompts"' in text else "summary" if '"summary"' in text else "success"
    if kind in ("summary", "success") and n_images == 0:
        problems.append(f"a {kind} request must attach the rollout's frames, found no image")
    goal = re.search(r'TASK: "([^"]+)"', text)
    n_new = re.search(r"Propose (\d+) NEW", text)
    return {
        "kind": kind,
        "model": req.get("model"),
        "n_images": n_images,
        "response_format": rf_type,
        "goal": goal.group(1) if goal else "",
        "n_new": int(n_new.group(1)) if n_new else 1,
        "n_messages": len(messages),
        "problems": problems,
        "prompt_tokens": len(text) // 4 + 85 * n_images,
        "text": text,
    }


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "fake_error", "code": None}}


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test): nothing to do

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("content-length", "0")))

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._send(200, {"ok": True})
            elif self.path == "/_requests":
                with server._lock:
                    self._send(200, list(server.requests))
            else:
                self._send(404, _error(f"no route GET {self.path}"))

        def do_POST(self) -> None:
            body = self._body()
            if self.path.rstrip("/").endswith("/chat/completions"):
                status, payload, headers = server.handle(body)
                self._send(status, payload, headers)
            elif self.path == "/_script":
                try:
                    server.set_script(json.loads(body))
                except ValueError as e:
                    self._send(400, _error(str(e)))
                    return
                self._send(200, {"ok": True})
            else:
                self._send(404, _error(f"no route POST {self.path}"))

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fake OpenAI-compatible VLM for tests (scripted replies).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--script", type=Path, help="JSON script (see module docstring); default: auto")
    args = parser.parse_args(argv)
    script = json.loads(args.script.read_text()) if args.script else []
    server = FakeOpenAIServer(args.host, args.port, script)
    print(f"fake openai listening on {server.base_url}", flush=True)
    try:
        server._httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
