#!/usr/bin/env bash
# Installs the Debian packages the project needs on a fresh machine (idempotent; root or sudo).
#   python3-venv  when `python3 -m venv` cannot bootstrap pip
#   redis-server  for the shared-state tests (started by the tests themselves on a free port)
#   nginx         optional: the overhead benchmark compares against it when present
#   wrk           with WITH_WRK=1: the scaling benchmark's load generator (C, Lua-scripted POSTs)
#   valgrind      with WITH_VALGRIND=1: the instructions benchmark counts under callgrind
#   prometheus    with WITH_PROMTOOL=1: its promtool lints a real gateway's /metrics (≈ 96 MB)
#   chromium      with WITH_CHROMIUM=1: the dashboard's browser test drives it (headless)
set -euo pipefail
want=()
python3 -c 'import ensurepip, venv' 2>/dev/null || want+=(python3-venv)
command -v redis-server >/dev/null 2>&1 || want+=(redis-server)
if [ "${WITH_NGINX:-0}" = 1 ] && ! command -v nginx >/dev/null 2>&1; then want+=(nginx-light); fi
if [ "${WITH_WRK:-0}" = 1 ] && ! command -v wrk >/dev/null 2>&1; then want+=(wrk); fi
if [ "${WITH_VALGRIND:-0}" = 1 ] && ! command -v valgrind >/dev/null 2>&1; then want+=(valgrind); fi
if [ "${WITH_PROMTOOL:-0}" = 1 ] && ! command -v promtool >/dev/null 2>&1; then want+=(prometheus); fi
if [ "${WITH_CHROMIUM:-0}" = 1 ] && ! command -v chromium >/dev/null 2>&1; then want+=(chromium); fi
[ ${#want[@]} -eq 0 ] && exit 0
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
# The Debian packages start their own services; the project starts its own on free ports.
for svc in redis-server nginx prometheus; do
  if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true; fi
done
