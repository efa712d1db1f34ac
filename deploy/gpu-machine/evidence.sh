#!/usr/bin/env bash
# The one command a GPU node runs (docs/gpu-runs/README.md): install the kit that travels in
# .gpuparts/part-1, then the whole evidence run, planned to end inside the call's limit. Everything comes back
# in OUT as five files: install.log, console.log and the evidence's summary.md, evidence.json, evidence.tar.xz.
#
#   bash deploy/gpu-machine/evidence.sh OUT LIMIT_S [kvsweep evidence flags ...]
#
# LIMIT_S is the call's time limit; the evidence gets what the install leaves of it, less a margin for packing.
# Here, with no GPU: PYTHON=.venv/bin/python INSTALL=0 bash deploy/gpu-machine/evidence.sh OUT LIMIT_S (the
# rehearsal on the CPU engine: `make gpu-rehearsal`).
set -uo pipefail
out=${1:?OUT}; limit_s=${2:?LIMIT_S}; shift 2
python=${PYTHON:-python3}
margin_s=30
mkdir -p "$out"
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 LMCACHE_TRACK_USAGE=false PYTHONUNBUFFERED=1
gpu=cpu
if command -v nvidia-smi >/dev/null && name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); then
  case $name in *H200*) gpu=H200 ;; *H100*) gpu=H100 ;; *) echo "no kit for $name: it is built for H100/H200" >&2; exit 2 ;; esac
fi
{
  date -u; uname -a; nvidia-smi 2>&1 || true; "$python" --version
  if [ "${INSTALL:-1}" = 1 ]; then
    bash .gpuparts/part-1/install.sh; echo "install.sh exit $?"
    # The kit installs without bytecode: compile vLLM's and LMCache's here, on every core, not in the first server.
    started=$SECONDS
    dirs=$("$python" -c 'import importlib.util as u, os; print(*(os.path.dirname(s.origin) for n in ("vllm", "lmcache") if (s := u.find_spec(n))))')
    [ -n "$dirs" ] && "$python" -m compileall -q -j 0 $dirs >/dev/null
    echo "bytecode of $dirs compiled in $((SECONDS - started)) s"
  fi
} 2>&1 | tee "$out/install.log" | tail -25
work=${WORK:-/tmp/kvsweep-evidence}
rm -rf "$work"
budget_s=$((limit_s - SECONDS - margin_s))
echo "install took ${SECONDS} s; evidence on $gpu with ${budget_s} s"
"$python" -m orchestrator.cli.evidence --gpu "$gpu" --out "$out" --work "$work" \
  --budget-s "$budget_s" "$@" 2>&1 | tee "$out/console.log"
