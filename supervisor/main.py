"""``pde supervisor``: VLM summaries, success proposals, candidate prompts and the pool.

Settings come from the environment (``PDE_SUPERVISOR_*``, plus the shared ``PDE_DATABASE_URL`` and
``PDE_DATA_DIR``); the flags below override them. An empty ``PDE_SUPERVISOR_BASE_URL`` (or
``--offline``) runs the rule-based paraphraser instead of a VLM.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from supervisor.settings import SupervisorSettings

log = logging.getLogger("supervisor")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pde supervisor", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--database-url", help="default: $PDE_DATABASE_URL or sqlite:///data/pde.db")
    p.add_argument(
        "--data-dir", type=Path, help="episodes and videos under <dir>/media (default: $PDE_DATA_DIR)"
    )
    p.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8001/v1")
    p.add_argument("--model", help="VLM model name as the endpoint knows it")
    p.add_argument("--offline", action="store_true", help="rule-based paraphrases, no VLM")
    p.add_argument("--tasks", nargs="+", help="supervise only these tasks (default: all in the database)")
    p.add_argument("--once", action="store_true", help="one poll, wait for its VLM requests, exit")
    p.add_argument(
        "--check",
        action="store_true",
        help="send one request with as many images as a real one may carry, report, exit (no database)",
    )
    p.add_argument("--log-level", default="INFO")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    overrides: dict[str, Any] = {}
    for key in ("database_url", "data_dir", "base_url", "model", "tasks"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    if args.offline:
        overrides["proposer"] = "offline"
    if os.environ.get("PDE_SUPERVISOR_ROLLOUTS_N"):
        log.warning(
            "PDE_SUPERVISOR_ROLLOUTS_N is ignored: N is the episode loop's PDE_LOOP_ROLLOUTS_PER_PROMPT, "
            "which the loop writes on each task for the supervisor to read"
        )
    try:
        settings = SupervisorSettings(**overrides)
    except ValidationError as e:
        print(f"pde supervisor: invalid settings:\n{e}", file=sys.stderr)
        return 2

    vlm = None
    if settings.proposer == "vlm":
        problem = settings.vlm_configured()
        if problem and not settings.base_url.strip():
            log.info("no VLM endpoint configured: offline paraphrase proposer, no summaries/proposals")
            settings = settings.model_copy(update={"proposer": "offline"})
        elif problem:
            print(f"pde supervisor: {problem}. Set it, or run with --offline.", file=sys.stderr)
            return 2
        else:
            from supervisor.vlm.openai_vlm import OpenAIVLM

            vlm = OpenAIVLM(settings)
            if args.check:
                return check_endpoint(vlm, settings)
            log.info(
                "VLM %s at %s (timeout %.0fs, %d attempts)",
                settings.model,
                settings.base_url,
                settings.request_timeout_s,
                settings.max_attempts,
            )

    if args.check:
        print("pde supervisor --check: no VLM endpoint configured (offline mode)", file=sys.stderr)
        return 1
    try:
        from pde_storage import Store
    except ImportError as e:
        print(
            f"pde supervisor: cannot import pde_storage ({e}); install with `pip install -e .[supervisor]`",
            file=sys.stderr,
        )
        return 2
    from supervisor.dedup import MiniLMEmbedder
    from supervisor.service import SupervisorService

    store = Store.open(url=settings.database_url, media_dir=settings.media_dir)
    embedder = MiniLMEmbedder(torch_threads=1)
    # Load the model in the background: the first heartbeat should not wait for torch to import.
    threading.Thread(target=embedder.encode, args=(["warm up"],), name="minilm-load", daemon=True).start()
    service = SupervisorService(store, settings, vlm, embedder)
    try:
        if args.once:
            service.step()
            # Bounded: every request gives up after its attempts and timeouts.
            deadline = (
                time.monotonic()
                + settings.max_attempts * (settings.request_timeout_s + settings.backoff_max_s) * 3
            )
            while not service.idle() and time.monotonic() < deadline:
                time.sleep(0.05)
                service.step()
            service.step()
            return 0
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        service.run(stop)
        return 0
    finally:
        service.close()
        store.close()


def check_endpoint(vlm: Any, settings: SupervisorSettings) -> int:
    """One summary request with ``max_images_per_request`` synthetic frames: proves the endpoint,
    the model name, the key, structured output and the server's image limit in one go."""
    import cv2
    import numpy as np

    from supervisor.vlm.base import CallRecord, RolloutFrames, SummaryRequest, VLMError

    calls: list[CallRecord] = []
    vlm.set_call_sink(calls.append)
    n_rollouts = settings.max_images_per_request // settings.frames_per_rollout
    rollouts = []
    for r in range(n_rollouts):
        frames = []
        for i in range(settings.frames_per_rollout):
            img = np.full((336, 448, 3), 60, np.uint8)
            cv2.circle(img, (40 + i * 45, 170), 20, (0, 180, 0), -1)  # a green blob moving right
            frames.append(cv2.imencode(".jpg", img)[1].tobytes())
        rollouts.append(RolloutFrames(frames, r % 2 == 0))
    req = SummaryRequest(
        "check", "move the green ball to the right", "move the green ball right", rollouts, 0.5
    )
    n_images = n_rollouts * settings.frames_per_rollout
    try:
        out = vlm.summarize_rollouts(req)
    except VLMError as e:
        print(
            f"FAILED: {settings.base_url} model {settings.model} with {n_images} images: {e}\n"
            "For vLLM: --limit-mm-per-prompt must allow that many images (see README, Supervisor).",
            file=sys.stderr,
        )
        return 1
    c = calls[-1]
    print(
        f"ok: {settings.base_url} model {settings.model}, {n_images} images, {c.prompt_tokens}+"
        f"{c.completion_tokens} tokens, {c.latency_s:.1f} s, {c.attempts} attempt(s)\nsummary: {out.summary}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
