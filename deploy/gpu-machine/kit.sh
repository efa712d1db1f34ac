#!/usr/bin/env bash
# Builds the GPU machine's kit into .gpuparts (git-ignored) with the workplace's ../shared/gpu/prepare.sh and this
# project's list of the packages the GPU image lacks (vllm-0.26-deps.txt beside this file). The list differs from
# the shared one: vLLM 0.26's API server imports llguidance and xgrammar (with apache-tvm-ffi) when it starts, which
# the first H200 call showed (docs/gpu-runs/2026-11-26-H200.md); rignore, fastar, sentry-sdk, supervisor and
# fastapi-cloud-cli, which nothing the server runs imports, make room for them in the 64 MiB a call carries.
# llguidance's wheels are manylinux_2_31, a platform the shared script does not ask pip for.
#
#   bash deploy/gpu-machine/kit.sh [SHARED_GPU_DIR]      # default ../shared/gpu; about four minutes
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source=${1:-$here/../../../shared/gpu}
[ -f "$source/prepare.sh" ] || { echo "no prepare.sh in $source: give the shared gpu folder" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$source"/* "$work/"
cp "$here/vllm-0.26-deps.txt" "$work/vllm-0.26-deps.txt"
sed -i 's/for p in manylinux_2_34_x86_64 /for p in manylinux_2_34_x86_64 manylinux_2_31_x86_64 /' "$work/prepare.sh"
grep -q manylinux_2_31_x86_64 "$work/prepare.sh" || { echo "prepare.sh's platform list changed: add manylinux_2_31 by hand" >&2; exit 1; }
bash "$work/prepare.sh"
