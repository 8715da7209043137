#!/usr/bin/env bash
# Set up lego on a fresh machine: the system tools local sandboxes need (bubblewrap, socat, git),
# a virtualenv in .venv, and the project with its dev tools. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1

missing=()
for tool in bwrap:bubblewrap socat:socat git:git; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool##*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing system packages: ${missing[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  # Another apt (unattended upgrades, a second set-up) may hold the dpkg lock: wait for it for up to
  # five minutes instead of failing with dpkg's raw lock error, and say so if it never frees.
  lock=(-o DPkg::Lock::Timeout=300)
  if ! { $SUDO apt-get "${lock[@]}" update -qq && $SUDO apt-get "${lock[@]}" install -y -qq "${missing[@]}" >/dev/null; }; then
    echo "could not install ${missing[*]} with apt-get (is another package manager still running?);" \
      "install them yourself, then re-run: bash scripts/setup.sh" >&2
    exit 1
  fi
fi

PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "lego needs Python >= 3.11")'
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch is pinned to a CPU-capable release in pyproject.toml; on a GPU machine install the CUDA
# build of the same version first and pip keeps it.
.venv/bin/pip install -q -e '.[dev]'
echo "lego is installed in .venv. Put it on your PATH in this shell with:  source .venv/bin/activate"
echo "(or call it as .venv/bin/lego)"
