#!/bin/sh
# Write constraints.txt less its tensorflow-cpu pin, for the GPU image (which installs the CUDA
# build, `tensorflow[and-cuda]`, of the same version: docker/requirements-gpu-worker.txt).
# Usage: docker/constraints-gpu.sh CONSTRAINTS_IN CONSTRAINTS_OUT
set -eu
grep -q '^tensorflow-cpu==' "$1" || { echo "constraints-gpu.sh: no tensorflow-cpu pin in $1" >&2; exit 1; }
grep -v '^tensorflow-cpu==' "$1" > "$2"
