#!/usr/bin/env bash
# Start a Docker engine on a bare Debian 12 machine/container (as root) and build the test image
# that tests marked `docker` use (tests/sandboxes/test_docker.py, and the red-team suite's docker
# variant, tests/redteam). Measured here: apt ~1 min, debootstrap 2 min 34 s, docker import ~5 s;
# then the 12 tests of test_docker.py take ~21 s and the 38 red-team tests on docker ~2 min 52 s
# (2 cores).
#
#   .ci/docker-setup.sh            # engine + image
#   pytest -m docker tests/sandboxes/test_docker.py tests/redteam
#
# Why these flags: inside a container there is no iptables and no bridge we may create, so the
# daemon runs with networking off (sandboxes use network_mode=none anyway; the only way out is the
# proxy's bind-mounted Unix socket).
set -euo pipefail
IMAGE=${LEGO_DOCKER_TEST_IMAGE:-lego-test-bookworm:latest}
ROOTFS=${ROOTFS:-/tmp/lego-rootfs}

apt_mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }' "$f"
  done | head -n 1 | grep . && return
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:\/\// && $i ~ /\/debian\/?$/) { print $i; exit } }' |
    head -n 1
}

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap
fi
if ! docker info >/dev/null 2>&1; then
  mkdir -p /tmp/dockerd
  nohup dockerd --bridge=none --iptables=false --ip6tables=false \
    --exec-root /tmp/dockerd/exec --pidfile /tmp/dockerd/docker.pid >/tmp/dockerd/log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null
fi
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  if [ ! -x "$ROOTFS/usr/bin/socat" ]; then
    rm -rf "$ROOTFS"
    # The mirror is this machine's own: the first Debian archive its apt sources name (deb822
    # .sources files or one-line .list files), so no host name is written into the project.
    mirror=$(apt_mirror)
    [ -n "$mirror" ] || { echo "no Debian mirror found in /etc/apt/sources.list{,.d/*}; set DEBIAN_MIRROR" >&2; exit 1; }
    debootstrap --variant=minbase --include=git,socat,python3,python3-pytest bookworm "$ROOTFS" "$mirror"
  fi
  tar -C "$ROOTFS" -c . | docker import -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin' - "$IMAGE"
fi
docker image inspect "$IMAGE" --format '{{.Id}} {{.Size}}'
