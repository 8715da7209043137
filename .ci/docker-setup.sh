#!/usr/bin/env bash
# Start a Docker engine on a bare Debian 12 machine/container (as root) and build the test image
# that tests marked `docker` use (tests/sandboxes/test_docker.py). Measured here: apt ~1 min,
# debootstrap 2 min 34 s, docker import ~5 s; the 6 docker tests then take ~16 s.
#
#   .ci/docker-setup.sh            # engine + image
#   pytest -m docker tests/sandboxes/test_docker.py
#
# Why these flags: inside a container there is no iptables and no bridge we may create, so the
# daemon runs with networking off (sandboxes use network_mode=none anyway; the only way out is the
# proxy's bind-mounted Unix socket).
set -euo pipefail
IMAGE=${LEGO_DOCKER_TEST_IMAGE:-lego-test-bookworm:latest}
ROOTFS=${ROOTFS:-/tmp/lego-rootfs}

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
    debootstrap --variant=minbase --include=git,socat,python3,python3-pytest bookworm "$ROOTFS" \
      http://deb.debian.org/debian
  fi
  tar -C "$ROOTFS" -c . | docker import -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin' - "$IMAGE"
fi
docker image inspect "$IMAGE" --format '{{.Id}} {{.Size}}'
