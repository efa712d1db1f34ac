#!/usr/bin/env bash
# Builds a GPU node's kit into .gpuparts (git-ignored) with the kit scripts in KIT_DIR (prepare.sh, install.sh, the
# smoke test; kept outside the repository) and this project's list of the packages the node's image lacks
# (vllm-0.26-deps.txt beside this file). The list differs from the kit scripts' own: vLLM 0.26's API server imports
# llguidance and xgrammar (with apache-tvm-ffi) when it starts, which the first H200 run showed
# (docs/gpu-runs/2026-11-26-H200.md); rignore, fastar, sentry-sdk, supervisor and fastapi-cloud-cli, which nothing the
# server runs imports, make room for them in the 64 MiB the kit is kept to. llguidance's wheels are manylinux_2_31, a
# platform prepare.sh does not ask pip for.
#
#   bash deploy/gpu-machine/kit.sh [KIT_DIR]      # default ../shared/gpu beside the checkout; about four minutes
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source=${1:-$here/../../../shared/gpu}
[ -f "$source/prepare.sh" ] || { echo "no prepare.sh in $source: give the folder of the kit scripts" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$source"/* "$work/"
cp "$here/vllm-0.26-deps.txt" "$work/vllm-0.26-deps.txt"
sed -i 's/for p in manylinux_2_34_x86_64 /for p in manylinux_2_34_x86_64 manylinux_2_31_x86_64 /' "$work/prepare.sh"
grep -q manylinux_2_31_x86_64 "$work/prepare.sh" || { echo "prepare.sh's platform list changed: add manylinux_2_31 by hand" >&2; exit 1; }
bash "$work/prepare.sh"
