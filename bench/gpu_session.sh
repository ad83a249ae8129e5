#!/usr/bin/env bash
# Everything a GPU session checks (issue 32), as ONE command of about 9 minutes:
#
#   bench/gpu_session.sh [STEP...]      STEP: tests profile runtime compare (default: all, in that order)
#   bench/gpu_session.sh --fetch-wheels (here, with PyPI at hand: the packages the GPU image lacks -> .whl/)
#   bench/gpu_session.sh --cpu-rehearsal [STEP...]   (here: the same commands on the CPU, small)
#
# Steps, each under its own time limit (`timeout`), so one hang cannot eat the session:
#   tests    ./dev test-gpu                    the tests marked gpu (tests/test_gpu.py)
#   profile  bench/bench_profile.py --device cuda        profile-cuda.md
#   runtime  bench/bench_runtime.py --device cuda        runtime-cuda.md (llama-8b: the stats target; gpt2)
#   compare  bench/compare.py --device cuda              cuda/compare.md (CoolCNN, ResNet-50, GPT-2; torchinfo)
#
# Reports go to bench/results/ as usual and, with the logs, a summary (session.md) and the
# raw worker results, to $OUT (the device tool copies $OUT back; 8 files at most) or, without
# $OUT, to bench/results/gpu-session/. The interpreter is $PYTHON, else .venv/bin/python,
# else python3 (a GPU image's own torch): nothing is installed but the wheels in .whl/, into
# a folder of /tmp. Without a CUDA device every step is skipped with a message and the exit
# status is 0 (a dry run: it still checks that the interpreter has what the steps import).
# The exit status is 1 if a step failed or ran out of time.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
WHEELS=(graphviz==0.21 torchinfo==1.8.0 torchview==0.2.7)
STEPS=(tests profile runtime compare)
# 520 s in all: a device call may run 600 s, and the start and the copies come on top
declare -A LIMIT=([tests]=${LIMIT_TESTS:-60} [profile]=${LIMIT_PROFILE:-50} [runtime]=${LIMIT_RUNTIME:-230} [compare]=${LIMIT_COMPARE:-180})

say() { printf '==> %s\n' "$*" >&2; }

if [ "${1:-}" = "--fetch-wheels" ]; then
  # The GPU image (python 3.12, manylinux x86-64) has torch, transformers, pytest and
  # hypothesis, and reaches no network: these pure-Python packages travel with the tree.
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl "${WHEELS[@]}" || exit 1
  ls .whl
  say "pass carry: [\".whl\", \"src/torchatlas/_render/web\"] to the device tool's run (the viewer bundle, built and git-ignored)"
  exit 0
fi

REHEARSE=no
if [ "${1:-}" = "--cpu-rehearsal" ]; then
  # The same steps with the same options on the CPU, on CoolCNN with short budgets, their
  # reports kept apart: proves the commands and flags before device time is spent on them.
  REHEARSE=yes
  shift
fi
chosen=("$@")
[ ${#chosen[@]} -eq 0 ] && chosen=("${STEPS[@]}")
for step in "${chosen[@]}"; do
  [[ " ${STEPS[*]} " == *" $step "* ]] || { echo "gpu_session.sh: unknown step '$step' (steps: ${STEPS[*]})" >&2; exit 2; }
done

if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3
fi
RESULTS=${OUT:-$REPO/bench/results/gpu-session}
mkdir -p "$RESULTS"
LOG=$RESULTS/session.log
: >"$LOG"

SITE=/tmp/torchatlas-gpu-site
if compgen -G ".whl/*.whl" >/dev/null; then
  say "installing the carried wheels into $SITE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl >>"$LOG" 2>&1 \
    || say "the wheels did not install (see session.log)"
fi
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}:$SITE" PYTHONUNBUFFERED=1

# What the steps import, and the card: one line each, in the summary.
env_lines=$("$PY" - <<'EOF' 2>&1
import importlib, platform, sys
print(f"- python {platform.python_version()} ({sys.executable})")
try:
    import torch
except ImportError as exc:
    print(f"- torch: not importable ({exc})")
    sys.exit(0)
cuda = torch.cuda.is_available()
card = torch.cuda.get_device_name() if cuda else "none (torch sees no CUDA device)"
print(f"- torch {torch.__version__}, CUDA {torch.version.cuda}, card: {card}")
missing = []
for name in ("torchatlas", "graphviz", "rich", "pytest", "hypothesis", "transformers", "torchinfo", "torchview"):
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        missing.append(f"{name} ({type(exc).__name__})")
import pathlib
if not pathlib.Path("src/torchatlas/_render/web/viewer.js").exists():
    missing.append("the built viewer, src/torchatlas/_render/web (HTML pages)")
print("- missing: " + (", ".join(missing) + " (docs/benchmarks.md: what to carry)" if missing else "nothing"))
print("CUDA=" + ("yes" if cuda else "no"))
EOF
)
CUDA=no
[[ "$env_lines" == *"CUDA=yes"* ]] && CUDA=yes
env_lines=$(printf '%s\n' "$env_lines" | grep -v '^CUDA=')
printf '%s\n' "$env_lines" >&2
driver=$(nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)

declare -A STATUS SECONDS_TAKEN
run_step() {  # name, command...: under its time limit, its output to the log and the console
  local name=$1; shift
  local start=$SECONDS rc
  say "$name (at most ${LIMIT[$name]} s): $*"
  printf '\n===== %s: %s\n' "$name" "$*" >>"$LOG"
  timeout --kill-after=15 "${LIMIT[$name]}" "$@" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  SECONDS_TAKEN[$name]=$((SECONDS - start))
  case $rc in
    0) STATUS[$name]=ok ;;
    124 | 137) STATUS[$name]="**ran out of time** (${LIMIT[$name]} s)" ;;
    *) STATUS[$name]="**failed** (exit $rc)" ;;
  esac
}

export PYTHON=$PY  # ./dev test-gpu runs it as it is, installing nothing
DEVICE=cuda
if [ "$REHEARSE" = yes ]; then
  DEVICE=cpu
  PRACTICE=$RESULTS/rehearsal
  mkdir -p "$PRACTICE"
  say "a rehearsal on the CPU: CoolCNN, short budgets, reports under $PRACTICE"
fi
for step in "${chosen[@]}"; do
  if [ "$CUDA" != yes ] && [ "$REHEARSE" != yes ]; then
    say "$step: skipped, torch sees no CUDA device here (bench/gpu_session.sh --cpu-rehearsal tries the commands)"
    STATUS[$step]="skipped: no CUDA device"; SECONDS_TAKEN[$step]=0
    continue
  fi
  case $step:$REHEARSE in
    tests:no) run_step tests ./dev test-gpu -p no:cacheprovider -rA --junitxml="$RESULTS/gpu-tests.xml" ;;
    tests:yes) run_step tests "$PY" -m pytest -q -p no:cacheprovider tests/test_gpu.py ;;  # the CPU variants run
    profile:no) run_step profile "$PY" bench/bench_profile.py --device cuda ;;
    profile:yes) run_step profile "$PY" bench/bench_profile.py --device cpu --models coolcnn --rounds 3 --out "$PRACTICE/profile.md" ;;
    runtime:no) run_step runtime "$PY" bench/bench_runtime.py --device cuda --models llama-8b,gpt2 --budget 3 --timeout 150 ;;
    runtime:yes) run_step runtime "$PY" bench/bench_runtime.py --device cpu --models coolcnn --budget 0.5 --timeout 150 \
      --out "$PRACTICE/runtime.md" ;;
    compare:no) run_step compare "$PY" bench/compare.py --device cuda --python "$PY" --models coolcnn,resnet50,gpt2 \
      --tools torchatlas,torchinfo --budget 2 --timeout 60 ;;
    compare:yes) run_step compare "$PY" bench/compare.py --device cpu --python "$PY" --models coolcnn \
      --tools torchatlas,torchinfo --budget 0.5 --timeout 60 --out "$PRACTICE/compare" ;;
  esac
done

failed=0
{
  echo "# GPU session$([ "$REHEARSE" = yes ] && echo ' (a CPU rehearsal)'): $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)${driver:+; driver, memory: $driver}."
  printf '%s\n' "$env_lines"
  echo
  echo "| step | result | seconds |"
  echo "|---|---|---|"
  for step in "${chosen[@]}"; do
    echo "| $step | ${STATUS[$step]} | ${SECONDS_TAKEN[$step]} |"
    [[ "${STATUS[$step]}" == ok || "${STATUS[$step]}" == skipped* ]] || failed=1
  done
} >"$RESULTS/session.md"
cat "$RESULTS/session.md" >&2

# The reports beside the summary (the device tool brings back 8 files, 2 folders deep at most).
if [ "$CUDA" = yes ]; then
  for pair in profile-cuda.md:profile-cuda.md runtime-cuda.md:runtime-cuda.md \
      cuda/compare.md:compare-cuda.md cuda/compare.json:compare-cuda.json; do
    [ -f "bench/results/${pair%%:*}" ] && cp "bench/results/${pair%%:*}" "$RESULTS/${pair##*:}"
  done
  tar -czf "$RESULTS/raw.tar.gz" $(ls -d bench/results/raw bench/results/cuda/raw 2>/dev/null) 2>/dev/null
fi
exit $failed
