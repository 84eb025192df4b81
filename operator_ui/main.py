"""``pde ui``: the operator page (FastAPI + uvicorn)."""

from __future__ import annotations

import argparse
import logging
import secrets
import sys
from typing import Any

from operator_ui.settings import UISettings, check_exposure
from pde_contract.link import client_curve_from_env
from teleop.settings import TeleopSettings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="pde ui", description="Operator web page: live view, labels, e-stop, curves."
    )
    p.add_argument("--host", help="bind address (default 127.0.0.1; others need PDE_UI_TOKEN)")
    p.add_argument("--port", type=int)
    p.add_argument("--database-url")
    p.add_argument("--data-dir")
    p.add_argument("--robot", dest="robot_cmd_endpoint", help="robot server command endpoint")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    overrides: dict[str, Any] = {k: v for k, v in vars(args).items() if v is not None}
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = UISettings(**overrides)
        check_exposure(settings)
        robot_keys = client_curve_from_env()  # PDE_ROBOT_LINK_*: the robot link's CURVE keys
        teleop = TeleopSettings()  # PDE_TELEOP_*: the page's keys and gamepad, its takes' folder
    except ValueError as e:
        print(f"pde ui: {e}", file=sys.stderr)
        return 2
    token = settings.token
    if not token:
        token = secrets.token_urlsafe(24)
        print(f"pde ui: no PDE_UI_TOKEN set; this run's token is {token}", file=sys.stderr)
    import uvicorn

    from operator_ui.app import create_app
    from operator_ui.http_limits import DeepQueueServer, accept_burst, bounded_h11, raise_file_limit

    print(f"pde ui: open http://{settings.host}:{settings.port}/#token={token}", file=sys.stderr, flush=True)
    raise_file_limit()
    config = uvicorn.Config(
        create_app(settings, token, robot_keys=robot_keys, teleop_settings=teleop),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        timeout_graceful_shutdown=2,  # open video downloads must not hold a shutdown for long
        timeout_keep_alive=settings.keep_alive_s,
        backlog=accept_burst(settings.max_connections, settings.max_connections_per_client),
        http=bounded_h11(
            settings.request_read_timeout_s,
            settings.max_request_bytes,
            settings.max_connections,
            settings.max_connections_per_client,
        ),
    )
    server = DeepQueueServer(config)
    server.run()
    if not server.started:  # e.g. the port is taken: uvicorn logged why
        return 1
    return 0
