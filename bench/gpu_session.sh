#!/usr/bin/env bash
# The prepared π0.5 GPU session (issue 25): one run of bench/bench_pi05.py with the chunk latency
# before and after the real-time path (eager / fast / fast_graphs, same run, ratios) and the loop's
# memory on one GPU (actor copy + trainer + weight swap; trainable all and expert). Full size, random
# weights. Writes bench/results/pi05_<gpu>.json (the GPU named inside and in the name), also into
# $OUT when set (the device machine sends $OUT back). About 3-5 minutes on one H100/H200; the
# benchmark is stopped at 540 s so the result file (written after every part) still comes back.
#
#   bench/gpu_session.sh --prepare          # here, with network: the wheels the GPU image lacks -> .whl/
#   bash bench/gpu_session.sh               # on the GPU machine (the run tool: carry [".whl"], timeout_s 600)
#   bench/gpu_session.sh --tiny --device cpu --latency-runs 3 --loop-rollouts 4 --loop-chunks 1
#                                           # the script checked end to end on a CPU (tiny model)
#
# Other arguments go to bench_pi05.py. Then commit bench/results/pi05_<gpu>.json and put its
# figures in README.md's π0.5 section.
set -euo pipefail
cd "$(dirname "$0")/.."

# What bench_pi05 imports that the GPU image (python3 with torch, numpy, tokenizers, safetensors,
# opencv) does not hold; versions from docker/constraints.txt.
WHEELS=(
  annotated-types==0.8.0 msgspec==0.22.0 pydantic==2.14.4 pydantic_core==2.50.5
  pydantic-settings==2.16.3 python-dotenv==1.2.4 pyzmq==27.3.0 typing-inspection==0.4.5
  typing_extensions==4.16.0
)

if [[ "${1:-}" == "--prepare" ]]; then
  exclude=$(git rev-parse --git-path info/exclude)
  grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
  platforms=()
  for n in 2_28 2_27 2_17 2_5; do platforms+=(--platform "manylinux_${n}_x86_64"); done
  "${PIP_PYTHON:-python3}" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]}" --platform manylinux2014_x86_64 -d .whl "${WHEELS[@]}"
  ls -l .whl
  exit 0
fi

PY=${PYTHON:-python3}
if ! "$PY" -c "import msgspec, pydantic_settings, zmq" 2>/dev/null; then
  if ! compgen -G ".whl/*.whl" >/dev/null; then
    echo "gpu_session: $PY lacks msgspec/pydantic-settings/pyzmq and there is no .whl/: run" \
      "'bench/gpu_session.sh --prepare' where pip works and carry .whl" >&2
    exit 2
  fi
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/pde-gpu-session-site .whl/*.whl
  export PYTHONPATH=/tmp/pde-gpu-session-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
started=$(mktemp)
status=0
timeout 540 "$PY" bench/bench_pi05.py --parts latency,loop-memory --latency-runs 100 --out auto "$@" ||
  status=$?
if [[ -n "${OUT:-}" ]]; then
  find bench/results -maxdepth 1 -name 'pi05_*.json' -newer "$started" -exec cp {} "$OUT"/ \;
fi
exit "$status"
