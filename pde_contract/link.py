"""The robot link's security: ZeroMQ CURVE keys for the command and the observation sockets.

Without keys the robot server binds loopback only (``RobotServerSettings`` refuses anything
else). With keys every connection to either socket is encrypted, and the server's ZAP handler
accepts only clients whose public key it lists, so on the lab LAN nobody else can move the arm or
watch the cameras. A client with an unlisted key, with the wrong server key, or without CURVE
gets no reply and no observation at all.

Key files are czmq certificates (``pde keys`` writes them): ``NAME.key`` holds the public key,
``NAME.key_secret`` the public and the secret key (mode 0600). Who holds what:

- robot PC: ``server.key_secret`` (``PDE_ROBOT_LINK_SECRET_KEY``) and a folder of the clients'
  ``*.key`` files (``PDE_ROBOT_LINK_CLIENTS_DIR``);
- each client machine: ``server.key`` (``PDE_ROBOT_LINK_SERVER_KEY``) and its own
  ``NAME.key_secret`` (``PDE_ROBOT_LINK_CLIENT_KEY``).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import zmq
from zmq.auth.thread import ThreadAuthenticator

log = logging.getLogger(__name__)

# The environment variables a client process reads its keys from (the one home of these names).
ENV_SERVER_KEY = "PDE_ROBOT_LINK_SERVER_KEY"
ENV_CLIENT_KEY = "PDE_ROBOT_LINK_CLIENT_KEY"
# The robot server's own (RobotServerSettings fields link_secret_key / link_clients_dir).
ENV_SERVER_SECRET_KEY = "PDE_ROBOT_LINK_SECRET_KEY"
ENV_CLIENTS_DIR = "PDE_ROBOT_LINK_CLIENTS_DIR"

PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"
ZAP_DOMAIN = "pde-robot"
_Z85_KEY_CHARS = 40  # a 32-byte Curve25519 key in Z85

_HOW_TO = "create keys with `pde keys init DIR` (docs/lab-setup.md, 'Robot link keys')"


class LinkKeyError(ValueError):
    """A key file or folder is missing, unreadable or of the wrong kind; the message says which
    and how to make one."""


@dataclass(frozen=True)
class CurveKeyPair:
    """Z85-encoded Curve25519 keys; ``secret`` is None for a public-key file."""

    public: bytes
    secret: bytes | None = None


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name or a wildcard ("*", "0.0.0.0" parses and is not loopback)
        return False


# --- key files -----------------------------------------------------------------------------------


def _write_key_file(path: Path, keys: CurveKeyPair, mode: int) -> None:
    kind = "secret" if keys.secret else "public"
    lines = [
        f"#   ZeroMQ CURVE {kind} key of the PDE robot link, written by `pde keys`.",
        "#   Secret keys stay on their machine; copy only *.key files." if keys.secret else "#",
        "metadata",
        "curve",
        f'    public-key = "{keys.public.decode()}"',
    ]
    if keys.secret:
        lines.append(f'    secret-key = "{keys.secret.decode()}"')
    # O_EXCL: never overwrite a key someone already distributed; mode at creation, not after.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")


def generate_key_pair(directory: Path, name: str) -> tuple[Path, Path]:
    """Write ``NAME.key`` (public, 0644) and ``NAME.key_secret`` (0600) into ``directory``;
    returns their paths. Refuses to overwrite existing files."""
    if not name or "/" in name or name.startswith("."):
        raise LinkKeyError(f"key name {name!r} must be a plain file name such as 'learner'")
    directory.mkdir(parents=True, exist_ok=True)
    public_path, secret_path = directory / f"{name}{PUBLIC_SUFFIX}", directory / f"{name}{SECRET_SUFFIX}"
    for p in (public_path, secret_path):
        if p.exists():
            raise LinkKeyError(f"{p} exists: keys are never overwritten; delete it first to replace it")
    public, secret = zmq.curve_keypair()
    _write_key_file(secret_path, CurveKeyPair(public, secret), 0o600)
    _write_key_file(public_path, CurveKeyPair(public), 0o644)
    return public_path, secret_path


def read_key_file(path: Path | str) -> CurveKeyPair:
    """The keys in one czmq certificate file (``secret`` None when it holds only the public key)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="ascii")
    except OSError as e:
        raise LinkKeyError(f"cannot read the key file {path} ({e.strerror}): {_HOW_TO}") from e
    except UnicodeDecodeError as e:
        raise LinkKeyError(f"{path} is not a key file (not ASCII): {_HOW_TO}") from e
    found: dict[str, bytes] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() in ("public-key", "secret-key"):
            found[key.strip()] = value.strip().strip("'\"").encode()
    public, secret = found.get("public-key"), found.get("secret-key")
    for what, key_z85 in (("public-key", public), ("secret-key", secret)):
        if key_z85 is not None and len(key_z85) != _Z85_KEY_CHARS:
            raise LinkKeyError(
                f"{path}: {what} has {len(key_z85)} characters, a Z85 CURVE key has 40: {_HOW_TO}"
            )
    if public is None:
        raise LinkKeyError(f"{path} holds no public-key line: not a `pde keys` file; {_HOW_TO}")
    return CurveKeyPair(public, secret)


def read_secret_key_file(path: Path | str) -> CurveKeyPair:
    keys = read_key_file(path)
    if keys.secret is None:
        raise LinkKeyError(
            f"{path} holds only a public key: give the {SECRET_SUFFIX} file of this machine's own pair"
        )
    return keys


def read_public_keys(directory: Path | str) -> frozenset[bytes]:
    """The public keys of every ``*.key`` file in ``directory`` (the clients a server accepts)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise LinkKeyError(f"{directory} is not a folder of client *.key files: {_HOW_TO}")
    return frozenset(read_key_file(p).public for p in sorted(directory.glob(f"*{PUBLIC_SUFFIX}")))


# --- sockets -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerCurve:
    """The robot server's side: its own key pair and the client keys it accepts."""

    keys: CurveKeyPair
    allowed_clients: frozenset[bytes]

    @classmethod
    def from_files(cls, secret_key_file: Path | str, clients_dir: Path | str) -> ServerCurve:
        keys = read_secret_key_file(secret_key_file)
        clients = read_public_keys(clients_dir)
        if not clients:
            raise LinkKeyError(
                f"{clients_dir} holds no client *.key file: no client could connect; copy the "
                f"clients' public keys there ({_HOW_TO})"
            )
        # The server's own key is accepted too, so `pde health robot-server` on the robot PC can
        # use the server's key pair without a client key of its own.
        return cls(keys, clients | {keys.public})

    def apply(self, sock: zmq.Socket) -> None:
        """Make ``sock`` a CURVE server; call before bind."""
        assert self.keys.secret is not None
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.keys.secret)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.keys.public)
        sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN.encode())


@dataclass(frozen=True)
class ClientCurve:
    """A client's side: the server's public key and the client's own key pair."""

    server_public: bytes
    keys: CurveKeyPair

    @classmethod
    def from_files(cls, server_key_file: Path | str, client_key_file: Path | str) -> ClientCurve:
        return cls(read_key_file(server_key_file).public, read_secret_key_file(client_key_file))

    @classmethod
    def as_server(cls, server_secret_key_file: Path | str) -> ClientCurve:
        """The server's own pair used as a client (which it always accepts): health checks on the
        robot PC."""
        keys = read_secret_key_file(server_secret_key_file)
        return cls(keys.public, keys)

    def apply(self, sock: zmq.Socket) -> None:
        """Make ``sock`` a CURVE client of the server; call before connect."""
        assert self.keys.secret is not None
        sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_public)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.keys.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.keys.secret)


def client_curve_from_env(environ: Mapping[str, str] | None = None) -> ClientCurve | None:
    """The client keys named by ``PDE_ROBOT_LINK_SERVER_KEY`` and ``PDE_ROBOT_LINK_CLIENT_KEY``;
    None when neither is set (a plain loopback link). One without the other is an error."""
    env = os.environ if environ is None else environ
    server_key, client_key = env.get(ENV_SERVER_KEY, ""), env.get(ENV_CLIENT_KEY, "")
    if not server_key and not client_key:
        return None
    if not (server_key and client_key):
        missing = ENV_CLIENT_KEY if server_key else ENV_SERVER_KEY
        raise LinkKeyError(
            f"{ENV_SERVER_KEY} and {ENV_CLIENT_KEY} go together and {missing} is empty: set it "
            f"(the server's public server.key and this client's own NAME.key_secret) or unset both"
        )
    return ClientCurve.from_files(server_key, client_key)


def client_curve_for_command(prog: str) -> ClientCurve | None:
    """``client_curve_from_env()`` for a command-line tool: a bad key setting ends it with exit
    code 2 and the message (no traceback)."""
    try:
        return client_curve_from_env()
    except LinkKeyError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        raise SystemExit(2) from None


class LinkAuthenticator:
    """ZAP handler on one context: accepts CURVE clients whose public key is listed, refuses and
    logs (once per key) every other one."""

    def __init__(self, context: zmq.Context, allowed_clients: frozenset[bytes]) -> None:
        self._allowed = allowed_clients
        self._lock = threading.Lock()
        self.refused: dict[bytes, int] = {}  # public key -> refusals (health detail, tests)
        self._auth = ThreadAuthenticator(context, log=logging.getLogger(f"{__name__}.zap"))
        self._auth.start()
        self._auth.configure_curve_callback(domain=ZAP_DOMAIN, credentials_provider=self)

    def callback(self, domain: str, key: bytes) -> bool:
        """Called by pyzmq's ZAP thread for each CURVE handshake with the client's Z85 key."""
        if key in self._allowed:
            return True
        with self._lock:
            n = self.refused[key] = self.refused.get(key, 0) + 1
        if n == 1:
            log.warning("robot link: refused a client with the unlisted public key %s", key.decode())
        return False

    def stop(self) -> None:
        self._auth.stop()
