"""`pde robot-server --backend franka` as a subprocess against a franky-sim: started, stopped,
killed (SIGKILL, as a crash) and started again on the same state files."""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field

from pde_contract.client import RobotClient, RobotServerError
from tests.helpers import free_port, pde_command, subprocess_env

RATE_HZ = 10.0
STARTUP_TIMEOUT_S = 60.0


@dataclass
class FrankaServer:
    proc: subprocess.Popen[str]
    client: RobotClient
    lines: list[str] = field(default_factory=list)

    def output(self) -> str:
        return "".join(self.lines)

    def stop(self, kill: bool = False) -> None:
        """SIGTERM (a clean stop) or SIGKILL (a crash: nothing of the server runs after it)."""
        self.client.close()
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=15.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_franka_server(fci_host: str, **env: str) -> FrankaServer:
    """A server on free ports, its client handshaken. ``env``: more PDE_* variables."""
    cmd_port, obs_port = free_port(), free_port()
    proc = subprocess.Popen(
        [
            *pde_command("robot-server", "--backend", "franka"),
            "--cmd-port",
            str(cmd_port),
            "--obs-port",
            str(obs_port),
            # 1 s, not the FR3's 200 ms: a loaded machine may pause the heartbeat thread.
            "--heartbeat-timeout-s",
            "1.0",
            "--control-rate-hz",
            str(RATE_HZ),
        ],
        env=subprocess_env(
            PDE_ROBOT_FCI_HOST=fci_host,
            PDE_ROBOT_CAMERAS="[]",
            PDE_FRANKA_REALTIME="ignore",  # franky-sim only: no PREEMPT_RT kernel here
            PDE_FRANKA_HOME_DYNAMICS_FACTOR="0.6",
            # franky-sim falls far behind real time on a loaded machine; homing then takes minutes
            PDE_FRANKA_HOME_TIMEOUT_S="150",
            PDE_ROBOT_RESET_TIMEOUT_S="170",
            PDE_ROBOT_RT_PRIORITY="0",  # no SCHED_FIFO control thread on a shared test machine
            **env,
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    server = FrankaServer(proc, RobotClient(f"tcp://127.0.0.1:{cmd_port}", name="test", timeout_s=2.0))

    def pump() -> None:  # ends with the process (its stdout closes)
        assert proc.stdout is not None
        for line in proc.stdout:
            server.lines.append(line)

    threading.Thread(target=pump, name="franka-server-output", daemon=True).start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            server.client.close()
            raise AssertionError(f"robot-server exited:\n{server.output()}")
        try:
            info = server.client.connect()
            break
        except RobotServerError:
            if time.monotonic() > deadline:
                server.stop(kill=True)
                raise AssertionError(
                    f"robot-server did not answer within {STARTUP_TIMEOUT_S} s:\n{server.output()}"
                ) from None
            time.sleep(0.2)
    assert info.backend == "franka"
    return server
