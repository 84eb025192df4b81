"""The robot link's CURVE security: key files, `pde keys`, and a real RobotServer (FakeRobot and
FakeCameras, real ZeroMQ CURVE sockets on 127.0.0.1) that answers only listed clients."""

from __future__ import annotations

import os
import select
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import ValidationError

from pde.health import Unhealthy, check_robot_server
from pde.keys import DEFAULT_CLIENTS
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
from tests.helpers import free_port, pde_command, subprocess_env
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
    # ... and the server's ZAP handler saw and refused the unlisted key (a connected client retries
    # its handshake, so wait while one is there)
    authenticator, stranger = lab.server._authenticator, read_key_file(stranger_secret).public
    assert authenticator is not None
    deadline = time.monotonic() + 30.0
    with lab.client(unlisted):
        while stranger not in authenticator.refused:
            assert time.monotonic() < deadline, "the unlisted key never reached the ZAP handler"
            time.sleep(0.05)


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


def test_pde_keys_command(tmp_path: Path) -> None:
    r = subprocess.run(
        pde_command("keys", "new", str(tmp_path), "laptop"),
        env=subprocess_env(),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    shown = subprocess.run(
        pde_command("keys", "show", str(tmp_path / "laptop.key")),
        env=subprocess_env(),
        capture_output=True,
        text=True,
    )
    assert shown.stdout.strip() == read_key_file(tmp_path / "laptop.key").public.decode()
    bad = subprocess.run(
        pde_command("keys", "show", str(tmp_path / "nope.key")),
        env=subprocess_env(),
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "cannot read the key file" in bad.stderr and "pde keys init" in bad.stderr


class _Tap:
    """A TCP forwarder between clients and one server port that keeps every byte it carries, to
    see what an eavesdropper on the lab LAN would see."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.seen = bytearray()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", free_port()))
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            server = socket.create_connection(("127.0.0.1", self.target_port))
            t = threading.Thread(target=self._pump, args=(client, server), daemon=True)
            t.start()
            self._threads.append(t)

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        with a, b:
            while not self._stop.is_set():
                ready, _, _ = select.select([a, b], [], [], 0.1)
                for src in ready:
                    data = src.recv(65536)
                    if not data:
                        return
                    (b if src is a else a).sendall(data)
                    with self._lock:
                        self.seen += data

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)
        self._listener.close()


def _tapped_exchange(server: RobotServer, curve: ClientCurve | None) -> bytes:
    """What crossed the wire while a client said Hello and read one observation."""
    s = server.settings
    cmd_tap, obs_tap = _Tap(s.cmd_port), _Tap(s.obs_port)
    try:
        with RobotClient(
            f"tcp://127.0.0.1:{cmd_tap.port}",
            "tapped",
            5.0,
            obs_endpoint=f"tcp://127.0.0.1:{obs_tap.port}",
            curve=curve,
        ) as c:
            c.connect()
            deadline = time.monotonic() + 10.0
            while not c.latest_observation(timeout_s=5.0).cameras:  # one with a picture in it
                assert time.monotonic() < deadline, "no observation with a camera frame"
    finally:
        cmd_tap.close()
        obs_tap.close()
    return bytes(cmd_tap.seen + obs_tap.seen)


def test_the_link_is_encrypted_on_the_wire(lab: Lab) -> None:
    jpeg = FakeCamera("external").jpeg[100:164]  # 64 bytes from inside the served picture
    plain_settings = RobotServerSettings(cmd_port=free_port(), obs_port=free_port(), control_rate_hz=20.0)
    with RobotServer(FakeRobot(), [FakeCamera("external")], plain_settings) as plain:
        seen = _tapped_exchange(plain, None)
    assert b"Hello" in seen and jpeg in seen  # the tap sees a plain link in the clear
    seen = _tapped_exchange(lab.server, lab.learner_keys())
    assert len(seen) > len(jpeg) and b"Hello" not in seen and jpeg not in seen


def test_ready_line_says_whether_the_link_is_encrypted(lab: Lab) -> None:
    from robot_server.main import _link_mode

    assert _link_mode(RobotServerSettings()) == "plain (loopback only)"
    assert (
        _link_mode(lab.server.settings)
        == f"curve ({len(DEFAULT_CLIENTS)} client keys from {lab.keys / 'robot-pc/clients'})"
    )


def test_robot_server_command_refuses_a_lan_host_without_keys() -> None:
    r = subprocess.run(
        pde_command("robot-server", "--backend", "sim", "--host", "0.0.0.0"),
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "is not loopback" in r.stderr and "pde keys init" in r.stderr, r.stderr


def test_client_commands_name_a_bad_key_setting(tmp_path: Path) -> None:
    public, _ = generate_key_pair(tmp_path, "server")
    r = subprocess.run(
        pde_command("robot-server", "watch", "--seconds", "1"),
        env=subprocess_env(**{ENV_SERVER_KEY: str(public), ENV_CLIENT_KEY: ""}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        r.returncode == 2 and f"pde robot-server watch: {ENV_SERVER_KEY} and {ENV_CLIENT_KEY}" in r.stderr
    ), r.stderr
