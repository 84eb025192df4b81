#!/usr/bin/env bash
# Debian packages the project needs: headless MuJoCo rendering (EGL/OSMesa), RealSense's libusb,
# Chromium for the page's browser tests, PostgreSQL for the storage tests, docker-compose (v1) to
# validate the compose file, ffmpeg for episode videos. Installs only what is missing.
set -euo pipefail
pkgs=(libegl1 libegl-mesa0 libopengl0 libgl1-mesa-dri libosmesa6 libusb-1.0-0
      chromium chromium-driver postgresql docker-compose ffmpeg)
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
