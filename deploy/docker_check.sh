#!/usr/bin/env bash
# Build the Dockerfile, start the image, and check it serves the app as a student would see it:
# /_stcore/health, Docker's own HEALTHCHECK, and every page opened in chromium with no exception
# (deploy/docker_pages.py). Needs a running Docker daemon and, for the page check, Playwright and
# Debian's chromium on this machine (requirements-test.txt).
#
#   deploy/docker_check.sh                       # the Dockerfile as a user builds it
#   deploy/docker_check.sh --local-base --torch-wheel /path/torch-2.13.0+cpu-cp311-...whl
#
# --local-base builds a stand-in for python:3.11-slim-bookworm from Debian's own packages
# (debootstrap; Debian bookworm's Python 3.11 in a virtual environment on PATH), for a machine that
# cannot pull images. --torch-wheel installs torch from that file instead of PyTorch's index.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=glassbox-check
BASE_TAG=glassbox-base:bookworm
PORT=8501  # the image's own port: its CMD and HEALTHCHECK name it
LOCAL_BASE=0
TORCH_WHEEL=""
while [ $# -gt 0 ]; do
  case "$1" in
    --local-base) LOCAL_BASE=1 ;;
    --torch-wheel) TORCH_WHEEL="$2"; shift ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
  shift
done

build_args=()
if [ "$LOCAL_BASE" = 1 ]; then
  if ! docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
    rootfs=$(mktemp -d)
    echo "== base image from debootstrap (bookworm, minbase) in $rootfs"
    debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
    chroot "$rootfs" apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates >/dev/null
    chroot "$rootfs" python3 -m venv /opt/python
    # This machine's own extra certificate authorities (a proxy that inspects TLS), so pip in the
    # build trusts what pip here trusts.
    if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
      cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
      chroot "$rootfs" update-ca-certificates >/dev/null 2>&1
    fi
    chroot "$rootfs" apt-get clean
    chmod 755 "$rootfs"  # mktemp made it 0700: the image's / would shut out its non-root user
    tar -C "$rootfs" -c . | docker import \
      --change 'ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' --change 'CMD ["python3"]' - "$BASE_TAG" >/dev/null
    rm -rf "$rootfs"
  fi
  build_args+=(--build-arg "BASE_IMAGE=$BASE_TAG")
fi
copied_wheel=""
if [ -n "$TORCH_WHEEL" ]; then
  mkdir -p wheels
  copied_wheel="wheels/$(basename "$TORCH_WHEEL")"
  [ -e "$copied_wheel" ] && copied_wheel=""  # already there: the user's, left in place
  cp -n "$TORCH_WHEEL" wheels/
  build_args+=(--build-arg "TORCH_INSTALL=/tmp/build/$(basename "$TORCH_WHEEL")")
fi

container=""
finish() {
  [ -n "$container" ] && docker rm -f "$container" >/dev/null 2>&1 || true
  if [ -n "$copied_wheel" ]; then rm -f "$copied_wheel"; rmdir wheels 2>/dev/null || true; fi
  true
}
trap finish EXIT

echo "== docker build"
start=$(date +%s)
# The host's network: this builder may have no bridge network of its own (and pip needs the index).
docker build --network host "${build_args[@]}" -t "$IMAGE" . >/tmp/glassbox-docker-build.log 2>&1 \
  || { tail -40 /tmp/glassbox-docker-build.log; exit 1; }
echo "built in $(( $(date +%s) - start )) s; image $(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.2f GB", $1/1e9}')"

echo "== docker run (the image's own command, on the host's network: port $PORT must be free)"
container=$(docker run -d --network host "$IMAGE")
echo "user in the container: $(docker exec "$container" id -un)"
for _ in $(seq 120); do
  curl -fsS "http://127.0.0.1:$PORT/_stcore/health" >/dev/null 2>&1 && break
  sleep 1
done
curl -fsS "http://127.0.0.1:$PORT/_stcore/health" >/dev/null || { docker logs "$container" | tail -40; exit 1; }
echo "healthy after $(( $(date +%s) - start )) s from the start of the build"

python3 deploy/docker_pages.py "http://127.0.0.1:$PORT"

echo "== Docker's HEALTHCHECK (its first probe comes 30 s after the start)"
for _ in $(seq 60); do
  status=$(docker inspect -f '{{.State.Health.Status}}' "$container")
  [ "$status" != starting ] && break
  sleep 2
done
echo "health: $status"
[ "$status" = healthy ]
if docker logs "$container" 2>&1 | grep -q "Traceback"; then
  docker logs "$container" 2>&1 | grep -B5 -A20 Traceback | head -60
  exit 1
fi
echo "docker check passed"
