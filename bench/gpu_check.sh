#!/usr/bin/env bash
# bench/gpu_check.sh: the checks that need one CUDA GPU, as one table, in under 8 minutes.
#
#   bash bench/gpu_check.sh              # from anywhere; the table on stdout and in $OUT/gpu_check.md
#   bash bench/gpu_check.sh --rehearse   # the same steps on the CPU, tiny: the code paths only
#
# Steps (bench/gpu_check.py): the gpu-marked tests; a shortened cifar10_resnet18 sweep (bf16,
# channels-last); four trials packed on one GPU against one at a time; bf16 against fp32; export of
# a CUDA-trained model. Each runs under its own `timeout`, cut to what is left of the budget.
# Without a GPU (nvidia-smi lists none and torch sees none) it prints one line and exits 0. It uses the first Python that imports a CUDA torch
# and the project's packages; failing that it installs the project (pip install -e '.[test]') into
# that Python's venv, or into .venv-gpu. Exit 0: every step passed; 1: a step failed or the GPU
# could not be used; 2: a bad argument.
set -uo pipefail

BUDGET_S=470  # the whole script, set-up included: under 8 minutes (GPU_CHECK_BUDGET_S)
SETUP_S=${GPU_CHECK_SETUP_S:-240}    # the most an install may take
STEPS=(tests sweep packing parity export)
declare -A LIMIT_S=([tests]=70 [sweep]=90 [packing]=140 [parity]=60 [export]=90)
MIN_STEP_S=20  # a step is skipped when less than this is left

flags=()
case "${1:-}" in
  "") ;;
  --rehearse) flags=(--rehearse); BUDGET_S=1200 ;;  # a CPU is slower: 3 x each step's limit
  *) echo "bench/gpu_check.sh: unknown argument ${1}: use no argument, or --rehearse" >&2; exit 2 ;;
esac
BUDGET_S=${GPU_CHECK_BUDGET_S:-$BUDGET_S}
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
export PYTHONDONTWRITEBYTECODE=1  # nothing written into the repository but what the set-up needs

say() { echo "gpu_check: $*" >&2; }
left() { echo $((BUDGET_S - SECONDS)); }

candidates() {
  local seen="" py
  for py in .venv-gpu/bin/python .venv/bin/python "$(command -v python3)" "$(command -v python)"; do
    [ -n "$py" ] && [ -x "$py" ] || continue
    case " $seen " in *" $py "*) continue ;; esac
    seen="$seen $py"
    echo "$py"
  done
}

# "cuda" (torch sees a GPU), "cpu" (torch imports) or nothing, for Python $1
torch_kind() {
  timeout 60 "$1" -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")' \
    2>/dev/null
}

has_project() {
  timeout 60 "$1" -c 'import mlflow, onnx, onnxruntime, onnxscript, optuna, pytest, yaml
import orchestrator.commands.cli, trainers' >/dev/null 2>&1
}

gpu_listed() { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }

say_once() {  # the one line of a run that checks nothing: stdout, and $OUT/gpu_check.md
  echo "$1"
  if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && echo "$1" >"$OUT/gpu_check.md"; fi
}

no_gpu() {  # the no-GPU line, from the first Python that imports torch; fails if one sees a GPU
  local py line="" rc
  local -a found
  mapfile -t found < <(candidates)
  for py in "${found[@]}"; do
    line=$(timeout 60 "$py" bench/gpu_check.py probe 2>/dev/null)
    rc=$?
    [ "$rc" -eq 0 ] && return 1  # torch sees a GPU that nvidia-smi does not list: check it
    [ "$rc" -ne 11 ] && [ -n "$line" ] && break
  done
  echo "${line:-no CUDA GPU on this machine: nothing to check (torch not installed)}"
}

install_into() {  # pip install -e '.[test]' with Python $1, its torch kept as it is
  local py=$1 pins
  pins=$(mktemp)
  "$py" -c 'import torch; print("torch==" + torch.__version__)' >"$pins" 2>/dev/null || : >"$pins"
  say "installing the project into $("$py" -c 'import sys; print(sys.prefix)') ($(cat "$pins"))"
  local limit=$(( $(left) < SETUP_S ? $(left) : SETUP_S ))
  [ "$limit" -gt 0 ] || limit=1
  timeout "$limit" "$py" -m pip install -q -c "$pins" \
    -e '.[test]' >&2
  local rc=$?
  rm -f "$pins"
  return $rc
}

is_venv() { "$1" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' 2>/dev/null; }

find_python() {  # echoes a Python with a CUDA torch and the project's packages, installing them
  local py kind cuda="" found
  mapfile -t found < <(candidates)
  for py in "${found[@]}"; do
    kind=$(torch_kind "$py")
    if [ "$kind" = cuda ]; then
      has_project "$py" && { echo "$py"; return 0; }
      [ -z "$cuda" ] && cuda=$py
    fi
  done
  if [ -n "$cuda" ] && is_venv "$cuda"; then
    install_into "$cuda" && has_project "$cuda" && { echo "$cuda"; return 0; }
  elif [ -n "$cuda" ]; then  # a system Python: a venv that sees its packages, torch among them
    "$cuda" -m venv --system-site-packages .venv-gpu && install_into .venv-gpu/bin/python \
      && has_project .venv-gpu/bin/python && { echo .venv-gpu/bin/python; return 0; }
  else  # no CUDA torch anywhere: PyPI's Linux wheel of torch is a CUDA build
    py=$(command -v python3) && [ -n "$py" ] && "$py" -m venv .venv-gpu \
      && install_into .venv-gpu/bin/python && [ "$(torch_kind .venv-gpu/bin/python)" = cuda ] \
      && has_project .venv-gpu/bin/python && { echo .venv-gpu/bin/python; return 0; }
  fi
  return 1
}

if [ ${#flags[@]} -gt 0 ]; then
  py=""
  mapfile -t found < <(candidates)
  for candidate in "${found[@]}"; do
    if has_project "$candidate"; then py=$candidate; break; fi
  done
  [ -n "$py" ] || { say "no Python here imports the project's packages: pip install -e '.[test]'"; exit 1; }
elif ! gpu_listed && line=$(no_gpu); then
  say_once "$line"
  exit 0
elif ! py=$(find_python); then
  say_once "nvidia-smi lists a GPU, but no Python here has a CUDA torch that can use it with the \
project's packages, and installing them failed or timed out (see the lines above)"
  exit 1
elif ! timeout 60 "$py" bench/gpu_check.py probe >&2; then
  exit 1
fi
say "using $py; $(left) s of the budget left"

work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rows" "$work/logs"
for step in "${STEPS[@]}"; do
  limit=$(( LIMIT_S[$step] * (${#flags[@]} > 0 ? 3 : 1) ))
  room=$(( $(left) - 15 ))  # 15 s kept for the table
  [ "$room" -lt "$limit" ] && limit=$room
  if [ "$limit" -lt "$MIN_STEP_S" ]; then
    echo "skip ${LIMIT_S[$step]} 0" >"$work/rows/$step.rc"
    continue
  fi
  say "step $step (at most $limit s)"
  started=$SECONDS
  timeout -k 10 "$limit" "$py" bench/gpu_check.py step "$step" "$work" ${flags[@]+"${flags[@]}"} \
    >"$work/logs/$step.log" 2>&1
  echo "$? $limit $((SECONDS - started))" >"$work/rows/$step.rc"
  if [ -n "${OUT:-}" ]; then  # each step's log as it ends: a run cut short still tells
    mkdir -p "$OUT/gpu_check_logs" && cp "$work/logs/$step.log" "$OUT/gpu_check_logs/"
  fi
done
timeout 60 "$py" bench/gpu_check.py table "$work" --out "${OUT:-}" ${flags[@]+"${flags[@]}"}
