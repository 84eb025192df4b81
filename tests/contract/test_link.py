"""The robot link's CURVE security: key files, `pde keys`, and a real RobotServer (FakeRobot and
FakeCameras, real ZeroMQ CURVE sockets on 127.0.0.1) that answers only listed clients."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import ValidationError

from pde.health import Unhealthy, check_robot_server
from pde.keys import main as keys_main
from pde_contract.client import RobotClient, RobotServerError
from pde_contract.link import (
    ENV_CLIENT_KEY,
    ENV_SERVER_KEY,
    ENV_SERVER_SECRET_KEY,
    ClientCurve,
    LinkKeyError,
    client_curve_from_env,
    generate_key_pair,
    is_loopback,
    read_key_file,
    read_secret_key_file,
)
from pde_contract.messages import ErrorCode
from robot_server.server import RobotServer
from robot_server.settings import RobotServerSettings
from tests.helpers import free_port
from tests.robot_server.fakes import FakeCamera, FakeRobot

REFUSED_WAIT_S = 0.5  # a refused client never gets a reply: how long each refusal test listens


@dataclass
class Lab:
    keys: Path
    server: RobotServer

    def client(self, curve: ClientCurve | None, timeout_s: float = 5.0) -> RobotClient:
        s = self.server.settings
        return RobotClient(s.cmd_endpoint, "test", timeout_s, obs_endpoint=s.obs_endpoint, curve=curve)

    def learner_keys(self) -> ClientCurve:
        return ClientCurve.from_files(
            self.keys / "workstation/server.key", self.keys / "workstation/learner.key_secret"
        )


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    assert keys_main(["init", str(tmp_path / "keys")]) == 0
    settings = RobotServerSettings(
        cmd_port=free_port(),
        obs_port=free_port(),
        control_rate_hz=20.0,
        link_secret_key=tmp_path / "keys/robot-pc/server.key_secret",
        link_clients_dir=tmp_path / "keys/robot-pc/clients",
    )
    srv = RobotServer(FakeRobot(), [FakeCamera("external")], settings)
    srv.start()
    try:
        yield Lab(tmp_path / "keys", srv)
    finally:
        srv.close()


def test_pde_keys_init_writes_one_folder_per_machine(tmp_path: Path) -> None:
    assert keys_main(["init", str(tmp_path), "--clients", "learner,tablet"]) == 0
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert files == [
        "robot-pc/clients/learner.key",
        "robot-pc/clients/tablet.key",
        "robot-pc/server.key_secret",
        "workstation/learner.key_secret",
        "workstation/server.key",
        "workstation/tablet.key_secret",
    ]
    for secret in tmp_path.rglob("*.key_secret"):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    # the public halves match their secret files
    server = read_secret_key_file(tmp_path / "robot-pc/server.key_secret")
    assert read_key_file(tmp_path / "workstation/server.key") == type(server)(server.public)
    assert read_key_file(tmp_path / "robot-pc/clients/tablet.key").public == (
        read_secret_key_file(tmp_path / "workstation/tablet.key_secret").public
    )
    # never overwrites
    assert keys_main(["init", str(tmp_path)]) == 2


def test_key_files_refuse_bad_input_naming_the_file(tmp_path: Path) -> None:
    public, _ = generate_key_pair(tmp_path, "a")
    with pytest.raises(LinkKeyError, match="exists"):
        generate_key_pair(tmp_path, "a")
    with pytest.raises(LinkKeyError, match="only a public key"):
        read_secret_key_file(public)
    with pytest.raises(LinkKeyError, match=r"cannot read the key file .*missing\.key"):
        read_key_file(tmp_path / "missing.key")
    bad = tmp_path / "bad.key"
    bad.write_text('public-key = "tooshort"\n')
    with pytest.raises(LinkKeyError, match="8 characters"):
        read_key_file(bad)
    with pytest.raises(LinkKeyError, match=f"{ENV_CLIENT_KEY} is empty"):
        client_curve_from_env({ENV_SERVER_KEY: str(public)})
    assert client_curve_from_env({}) is None


def test_server_refuses_a_non_loopback_host_without_keys(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="pde keys init"):
        RobotServerSettings(host="0.0.0.0")
    with pytest.raises(ValidationError, match="go together"):
        RobotServerSettings(host="0.0.0.0", link_secret_key=tmp_path / "server.key_secret")
    generate_key_pair(tmp_path, "server")
    (tmp_path / "clients").mkdir()
    with pytest.raises(ValidationError, match="holds no client"):
        RobotServerSettings(
            host="0.0.0.0",
            link_secret_key=tmp_path / "server.key_secret",
            link_clients_dir=tmp_path / "clients",
        )
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("*") and not is_loopback("192.168.1.10")


def test_listed_client_gets_replies_and_observations(lab: Lab) -> None:
    with lab.client(lab.learner_keys()) as c:
        assert c.connect().protocol_version > 0
        assert c.status() is not None
        obs = c.latest_observation(timeout_s=5.0)
        assert obs.seq >= 0 and {f.name for f in obs.cameras} <= {"external"}


def test_unlisted_key_plain_client_and_wrong_server_key_get_nothing(lab: Lab, tmp_path: Path) -> None:
    _, stranger_secret = generate_key_pair(tmp_path / "stranger", "laptop")
    _, other_server_secret = generate_key_pair(tmp_path / "other", "server")
    unlisted = ClientCurve.from_files(lab.keys / "workstation/server.key", stranger_secret)
    wrong_server = ClientCurve(read_key_file(other_server_secret).public, lab.learner_keys().keys)
    for curve in (unlisted, None, wrong_server):
        with lab.client(curve, timeout_s=REFUSED_WAIT_S) as c:
            with pytest.raises(RobotServerError) as e:
                c.connect()
            assert e.value.code is ErrorCode.TIMEOUT
            assert "PDE_ROBOT_LINK" in e.value.message  # the hint names the keys
            with pytest.raises(RobotServerError, match="no observation"):
                c.latest_observation_bytes(timeout_s=REFUSED_WAIT_S)
    assert lab.server._authenticator is not None
    assert read_key_file(stranger_secret).public in lab.server._authenticator.refused


def _healthy(endpoint: str) -> str:
    """The health check's answer once the server reports ok (its camera needs a first frame); a
    refused handshake ("does not answer") fails at once."""
    deadline = time.monotonic() + 30.0
    while True:
        try:
            return check_robot_server(endpoint, 5.0)
        except Unhealthy as e:
            assert "does not answer" not in str(e) and time.monotonic() < deadline, str(e)
            time.sleep(0.05)


def test_health_on_the_robot_pc_uses_the_server_key(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = lab.server.settings.cmd_endpoint
    for var in (ENV_SERVER_KEY, ENV_CLIENT_KEY):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(ENV_SERVER_SECRET_KEY, str(lab.keys / "robot-pc/server.key_secret"))
    assert "ok" in _healthy(endpoint)
    # on the workstation: the client's own keys
    monkeypatch.delenv(ENV_SERVER_SECRET_KEY)
    monkeypatch.setenv(ENV_SERVER_KEY, str(lab.keys / "workstation/server.key"))
    monkeypatch.setenv(ENV_CLIENT_KEY, str(lab.keys / "workstation/operator-ui.key_secret"))
    assert "ok" in _healthy(endpoint)
    assert os.environ[ENV_CLIENT_KEY].endswith("operator-ui.key_secret")
