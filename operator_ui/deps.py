"""FastAPI dependencies: the store, the robot link, and the token check for mutating requests."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Path, Query, Request

from operator_ui.robot_link import RobotLink
from operator_ui.settings import UISettings
from pde_storage.models import ROW_ID_MAX
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


# Ids start at 1 and end at ROW_ID_MAX (PostgreSQL's INTEGER): a larger number cannot be a row, and
# sent to the database it overflows (a 500); it is a 422 naming the parameter instead.
_ROW_ID = f"a row id, 1 to {ROW_ID_MAX}"
RowId = Annotated[int, Path(ge=1, le=ROW_ID_MAX, description=_ROW_ID)]
RowIdQuery = Annotated[int | None, Query(ge=1, le=ROW_ID_MAX, description=_ROW_ID)]

StoreDep = Annotated[OperatorStore, Depends(get_store)]
RobotDep = Annotated[RobotLink, Depends(get_robot)]
SettingsDep = Annotated[UISettings, Depends(get_settings)]
TokenDep = Depends(require_token)
