"""``pde keys``: ZeroMQ CURVE key pairs for the robot link (pde_contract/link.py).

    pde keys init keys/                       # the server and the default clients, ready to copy
    pde keys init keys/ --clients learner,operator-ui,recorder,laptop
    pde keys new keys/extra tablet            # one more pair: NAME.key and NAME.key_secret
    pde keys show keys/robot-pc/server.key_secret

``init`` writes two folders, one per machine (docs/lab-setup.md, "Robot link keys"):

    DIR/robot-pc/server.key_secret           PDE_ROBOT_LINK_SECRET_KEY on the robot PC
    DIR/robot-pc/clients/<client>.key        PDE_ROBOT_LINK_CLIENTS_DIR: the clients it accepts
    DIR/workstation/server.key               PDE_ROBOT_LINK_SERVER_KEY on every client
    DIR/workstation/<client>.key_secret      PDE_ROBOT_LINK_CLIENT_KEY of that client

Copy ``robot-pc/`` to the robot PC and ``workstation/`` to the workstation; a secret key never
needs to leave the machine it is for.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from pde_contract.link import LinkKeyError, generate_key_pair, read_key_file

DEFAULT_CLIENTS = ("learner", "operator-ui", "recorder")  # recorder: `pde record` (docs/teleop.md)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pde keys", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="the server's pair and each client's, in one folder per machine")
    init.add_argument("dir", type=Path)
    init.add_argument(
        "--clients",
        default=",".join(DEFAULT_CLIENTS),
        help=f"comma-separated client names (default {','.join(DEFAULT_CLIENTS)})",
    )
    new = sub.add_parser("new", help="one key pair: DIR/NAME.key and DIR/NAME.key_secret")
    new.add_argument("dir", type=Path)
    new.add_argument("name")
    show = sub.add_parser("show", help="print the public key of a key file")
    show.add_argument("file", type=Path)
    return p


def init(directory: Path, clients: list[str]) -> list[Path]:
    """Write the layout of the module docstring; returns the files written."""
    if not clients:
        raise LinkKeyError("--clients is empty: name at least one client, e.g. --clients learner")
    if len(set(clients)) != len(clients) or "server" in clients:
        raise LinkKeyError(
            f"--clients {','.join(clients)}: names must differ from each other and from 'server'"
        )
    robot_pc, workstation = directory / "robot-pc", directory / "workstation"
    for d in (robot_pc, workstation):
        if d.exists() and any(d.iterdir()):
            raise LinkKeyError(f"{d} is not empty: keys are never overwritten; pick another folder")
    written: list[Path] = []
    server_public, server_secret = generate_key_pair(robot_pc, "server")
    workstation.mkdir(parents=True, exist_ok=True)
    written += [server_secret, Path(shutil.move(server_public, workstation / server_public.name))]
    for name in clients:
        public, secret = generate_key_pair(workstation, name)
        (robot_pc / "clients").mkdir(exist_ok=True)
        written += [secret, Path(shutil.move(public, robot_pc / "clients" / public.name))]
    return written


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "init":
            clients = [c.strip() for c in args.clients.split(",") if c.strip()]
            for path in init(args.dir, clients):
                print(path)
        elif args.command == "new":
            for path in generate_key_pair(args.dir, args.name):
                print(path)
        else:
            print(read_key_file(args.file).public.decode())
    except LinkKeyError as e:
        print(f"pde keys: {e}", file=sys.stderr)
        return 2
    return 0
