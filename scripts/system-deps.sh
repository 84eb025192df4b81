#!/usr/bin/env bash
# Debian packages the project needs, installing only what is missing.
#
#   scripts/system-deps.sh           everything (CI, a development machine, the one-PC setup):
#                                    headless MuJoCo rendering (EGL/OSMesa), RealSense's libusb,
#                                    Chromium for the page's browser tests, PostgreSQL for the
#                                    storage tests, docker-compose (v1) to validate the compose
#                                    files, ffmpeg for episode videos, make and python3-venv
#   scripts/system-deps.sh --robot   the robot PC (`make install ROLE=robot`): what the robot
#                                    server needs and nothing else (no browser, no database)
#   ... --print                      list the packages of that role and install nothing
set -euo pipefail
role=all print=0
for arg in "$@"; do
  case "$arg" in
    --robot) role=robot ;;
    --print) print=1 ;;
    *) echo "system-deps: unknown option '$arg' (use --robot for the robot PC, --print to list)" >&2; exit 2 ;;
  esac
done
# The robot server: MuJoCo's headless rendering (the sim backend, for dry runs on the robot PC) and
# libusb for the RealSense cameras.
pkgs=(make libegl1 libegl-mesa0 libopengl0 libgl1-mesa-dri libosmesa6 libusb-1.0-0)
if [ "$role" = all ]; then
  pkgs+=(chromium chromium-driver postgresql docker-compose ffmpeg)
fi
# Debian's own python3 makes virtual environments only with python3-venv (ensurepip).
if [ "$(command -v python3)" = /usr/bin/python3 ] && ! python3 -c "import ensurepip" 2>/dev/null; then
  pkgs+=(python3-venv)
fi
if [ "$print" = 1 ]; then
  printf '%s\n' "${pkgs[@]}"
  exit 0
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "system-deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
  command -v sudo >/dev/null || { echo "system-deps: run as root or install: ${missing[*]}" >&2; exit 1; }
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
