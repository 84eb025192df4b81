"""FastAPI dependencies: the store, the robot link, and the token check for mutating requests."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request

from operator_ui.robot_link import RobotLink
from operator_ui.settings import UISettings
from pde_storage.protocols import OperatorStore


def get_store(request: Request) -> OperatorStore:
    store: OperatorStore = request.app.state.store
    return store


def get_robot(request: Request) -> RobotLink:
    robot: RobotLink = request.app.state.robot
    return robot


def get_settings(request: Request) -> UISettings:
    settings: UISettings = request.app.state.settings
    return settings


def require_token(
    request: Request,
    authorization: Annotated[str | None, Header()] = None,
    x_pde_token: Annotated[str | None, Header()] = None,
) -> None:
    expected: str = request.app.state.token
    given = x_pde_token or ""
    if authorization and authorization.lower().startswith("bearer "):
        given = authorization[7:].strip()
    if not given:
        raise HTTPException(
            401, "missing token: send 'Authorization: Bearer <PDE_UI_TOKEN>'; nothing was changed"
        )
    if not secrets.compare_digest(given.encode(), expected.encode()):
        raise HTTPException(403, "wrong token; nothing was changed")


StoreDep = Annotated[OperatorStore, Depends(get_store)]
RobotDep = Annotated[RobotLink, Depends(get_robot)]
SettingsDep = Annotated[UISettings, Depends(get_settings)]
TokenDep = Depends(require_token)
