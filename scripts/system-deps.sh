#!/usr/bin/env bash
# Debian packages the project needs: headless MuJoCo rendering (EGL/OSMesa), RealSense's libusb,
# Chromium for the page's browser tests, PostgreSQL for the storage tests, docker-compose (v1) to
# validate the compose file, ffmpeg for episode videos, make and python3-venv on a bare Debian.
# Installs only what is missing.
set -euo pipefail
pkgs=(make libegl1 libegl-mesa0 libopengl0 libgl1-mesa-dri libosmesa6 libusb-1.0-0
      chromium chromium-driver postgresql docker-compose ffmpeg)
# Debian's own python3 makes virtual environments only with python3-venv (ensurepip).
if [ "$(command -v python3)" = /usr/bin/python3 ] && ! python3 -c "import ensurepip" 2>/dev/null; then
  pkgs+=(python3-venv)
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
