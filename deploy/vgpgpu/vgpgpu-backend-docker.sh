#!/bin/sh
# A [registry.factory] launcher: one container per GPU running the site's
# rCUDA / VCL server image, pinned to its GPU, published on the port the
# registry gave it. `docker run -d` returns once the container runs, as the
# factory requires. Works with podman too (CDER_RUNTIME=podman).
#
#   vgpgpu-backend-docker.sh start UUID INDEX PORT VISIBLE_ENV METHODS
#   vgpgpu-backend-docker.sh stop UUID
#
# Set CDER_VGPGPU_IMAGE to the image (default site/vgpgpu-backend) whose
# entrypoint starts rCUDA's server (rCUDAd, listening on 8308) and/or the VCL
# backend, as METHODS (comma-separated) says.
set -eu
runtime=${CDER_RUNTIME:-docker}
image=${CDER_VGPGPU_IMAGE:-site/vgpgpu-backend}
name() { printf 'cder-vgpgpu-%s' "$1" | tr -c 'A-Za-z0-9_.-' '-'; }
case "${1:-}" in
start)
    [ $# -eq 6 ] || { echo "usage: $0 start UUID INDEX PORT VISIBLE_ENV METHODS" >&2; exit 2; }
    uuid=$2 index=$3 port=$4 visible=$5 methods=$6
    n=$(name "$uuid")
    # An existing, stopped container is reused (faster than a new one).
    if "$runtime" container inspect "$n" >/dev/null 2>&1; then
        exec "$runtime" start "$n"
    fi
    gpu="--gpus=device=$index"
    [ "$visible" = GPU_DEVICE_ORDINAL ] && gpu="--device=/dev/kfd --device=/dev/dri"
    # shellcheck disable=SC2086
    exec "$runtime" run -d --name "$n" --restart=unless-stopped $gpu \
        -e "$visible=0" -e "CDER_VGPGPU_UUID=$uuid" -e "CDER_VGPGPU_METHODS=$methods" \
        -p "$port:8308" "$image"
    ;;
stop)
    [ $# -eq 2 ] || { echo "usage: $0 stop UUID" >&2; exit 2; }
    exec "$runtime" rm -f "$(name "$2")"
    ;;
*)
    echo "usage: $0 start UUID INDEX PORT VISIBLE_ENV METHODS | stop UUID" >&2
    exit 2
    ;;
esac
