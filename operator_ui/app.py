"""The FastAPI application: routers per resource, store errors as 4xx, the static page."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from operator_ui.host_guard import HostOriginGuard, allowed_hosts
from operator_ui.record_session import RecordSession
from operator_ui.robot_link import RobotLink
from operator_ui.routers import episodes, health, loop, metrics, prompts, robot, run, state, teleop
from operator_ui.settings import UISettings
from pde_contract.link import ClientCurve
from pde_contract.settings import DataLayout
from pde_storage import ConflictError, InvalidArgumentError, NotFoundError, Store, StoredValueError
from teleop.settings import TeleopSettings

STATIC_DIR = Path(__file__).resolve().parent / "static"


def create_app(
    settings: UISettings,
    token: str,
    store: Store | None = None,
    robot_link: RobotLink | None = None,
    robot_keys: ClientCurve | None = None,
    teleop_settings: TeleopSettings | None = None,
) -> FastAPI:
    """``teleop_settings``: PDE_TELEOP_* (the page's keys and gamepad, and where its takes go:
    PDE_TELEOP_DEMOS_DIR, else <PDE_UI_DATA_DIR>/demos)."""
    teleop_settings = teleop_settings or TeleopSettings()
    demos = teleop_settings.demos if teleop_settings.demos_dir else DataLayout(settings.data_dir).demos

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.store = store or Store.open(settings.database_url, settings.media_dir)
        app.state.robot = robot_link or RobotLink(
            settings.robot_cmd_endpoint, settings.robot_timeout_s, curve=robot_keys
        )
        app.state.robot.start()
        app.state.record = RecordSession(
            app.state.robot.cmd_endpoint,
            teleop_settings,
            demos,
            DataLayout(settings.data_dir).record,
            curve=app.state.robot.curve,
        )
        try:
            yield
        finally:
            app.state.record.close()
            if robot_link is None:
                app.state.robot.close()
            if store is None:
                app.state.store.close()

    app = FastAPI(title="PDE operator page", lifespan=lifespan, docs_url="/api/docs", redoc_url=None)
    app.state.settings = settings
    app.state.token = token

    def _error(status: int) -> Any:
        async def handler(_: Request, exc: Exception) -> JSONResponse:
            return JSONResponse({"detail": str(exc)}, status_code=status)

        return handler

    app.add_exception_handler(NotFoundError, _error(404))
    app.add_exception_handler(ConflictError, _error(409))
    app.add_exception_handler(InvalidArgumentError, _error(422))
    # A row this version cannot read: the server's fault, but the operator sees which row and why.
    app.add_exception_handler(StoredValueError, _error(500))
    for r in (state, episodes, loop, prompts, metrics, robot, health, run, teleop):
        app.include_router(r.router)
    # Outermost: no route answers a foreign Host or Origin (the E-STOP and the static files included).
    app.add_middleware(HostOriginGuard, hosts=allowed_hosts(settings.host, settings.allowed_host_names))
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-store"})

    return app
