"""A stand-in for the episode loop or the supervisor as a real process, for the page's kill -9
tests: it writes that service's state row with the service's own Heartbeat class and default
period (PDE_LOOP_HEARTBEAT_PERIOD_S, PDE_SUPERVISOR_HEARTBEAT_PERIOD_S), and nothing else, until
it is killed. (The real loop needs a robot server and a policy; what the page sees of it, the
row and its beat, is the same.)

    python -m tests.operator_ui.beating_service <database url> <media dir> loop|supervisor
"""

from __future__ import annotations

import os
import sys
import threading

from learner.loop.settings import LoopSettings
from pde_contract.service_state import (
    LOOP_ROW,
    SUPERVISOR_ROW,
    LoopPhase,
    LoopState,
    ServiceMessage,
    SupervisorState,
)
from pde_storage import Store
from pde_storage.heartbeat import Heartbeat
from pde_storage.service_states import write_state
from supervisor.settings import SupervisorSettings

TASK = "put_green_container_in_bowl"


def main(url: str, media_dir: str, service: str) -> None:
    store = Store.open(url, media_dir)
    state: ServiceMessage
    if service == "loop":
        name, period_s = LOOP_ROW, LoopSettings.model_fields["heartbeat_period_s"].default
        state = LoopState(phase=LoopPhase.AWAITING_START, pid=os.getpid(), task=TASK, prompt="put it in")
    else:
        name, period_s = SUPERVISOR_ROW, SupervisorSettings.model_fields["heartbeat_period_s"].default
        state = SupervisorState(phase="running", proposer="offline")
    write_state(store, name, state)
    with Heartbeat(f"{service} heartbeat", period_s, lambda: write_state(store, name, state)):
        print("beating", flush=True)
        threading.Event().wait()  # until killed


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
