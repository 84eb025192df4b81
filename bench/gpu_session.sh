#!/usr/bin/env bash
# The prepared π0.5 GPU session (issues 25, 35): one run of bench/bench_pi05.py, full size, random
# weights: per path (eager, fast, the modules' graphs, the fused graphs, fused + compiled graphs)
# the chunk latency, kernels per chunk, images/prefix/chain apart and a weight swap; LeRobot 0.6.1's
# own PI05Policy on the same weights and inputs beside ours, with the ratios; and the loop's memory on
# one GPU (actor copy + trainer + swap; trainable all and expert). Writes bench/results/pi05_<gpu>.json
# (the GPU named inside and in the name), also into $OUT when set (the device machine sends $OUT
# back). Planned for <= 8 minutes on one H100/H200: the benchmark is stopped at 450 s so the result
# file (written after every part) still comes back.
#
#   bench/gpu_session.sh --prepare          # here, with network: the wheels the GPU image lacks -> .whl/
#   bash bench/gpu_session.sh               # on the GPU machine (the run tool: carry [".whl"], timeout_s 600)
#   PDE_GPU_SESSION_TIMEOUT_S=1500 PYTHON=<a Python 3.12 with torch 2.11> bench/gpu_session.sh --tiny \
#     --device cpu --latency-runs 3 --slow-runs 2 --lerobot-runs 2 --loop-rollouts 4 --loop-chunks 1
#                                           # the script checked end to end on a CPU (tiny model)
#
# The LeRobot side runs in the same Python with .whl/lerobot/ on its path (the GPU machine: Python
# 3.12, torch 2.11, which LeRobot 0.6.1 takes); elsewhere PDE_LEROBOT_PYTHON names a Python where
# LeRobot 0.6.1 imports (docs/pi05.md). Other arguments go to bench_pi05.py. Then commit
# bench/results/pi05_<gpu>.json and put its figures in README.md's π0.5 section.
set -euo pipefail
cd "$(dirname "$0")/.."

# What bench_pi05 imports that the GPU image (python3 with torch, numpy, tokenizers, safetensors,
# opencv) does not hold; versions from docker/constraints.txt.
WHEELS=(
  annotated-types==0.8.0 msgspec==0.22.0 pydantic==2.14.4 pydantic_core==2.50.5
  pydantic-settings==2.16.3 python-dotenv==1.2.4 pyzmq==27.3.0 typing-inspection==0.4.5
  typing_extensions==4.16.0
)

# LeRobot 0.6.1's π0.5 (bench/lerobot_pi05_latency.py): what importing its PI05Policy and config
# loads, less what the GPU image holds (torch 2.11 with its own dependencies, numpy, tokenizers,
# safetensors, opencv), at the versions pip resolved for lerobot[pi]==0.6.1 with torch 2.11.0 on
# Python 3.12. Not scipy (35 MB): transformers imports it only where it is installed. tokenizers and
# numpy too, in LeRobot's own folder: transformers 5.5 refuses tokenizers > 0.23.0 (ours pins
# 0.23.3), LeRobot 0.6.1 needs numpy >= 2 (ours pins 1.26.4); our side keeps the image's.
LEROBOT_WHEELS=(
  lerobot==0.6.1 transformers==5.5.4 huggingface_hub==1.33.0 torchvision==0.26.0 pillow==12.3.0
  draccus==0.11.6 gymnasium==1.4.0 Farama-Notifications==0.0.6 einops==0.8.2 PyYAML==6.0.4
  Pygments==2.21.0 rich==15.0.0 anyio==4.16.0 certifi==2026.10.19.post1 charset-normalizer==3.5.3
  click==8.5.1 h11==0.16.0 httpcore==1.0.9 httpx==0.28.1 idna==3.20 mergedeep==1.3.4
  mypy_extensions==1.2.0 packaging==25.0 regex==2026.11.19 requests==2.34.2 typing-inspect==0.9.0
  urllib3==2.8.0 tqdm==4.70.1 toml==0.10.2 markdown-it-py==4.3.0 mdurl==0.1.2 cloudpickle==3.1.3
  tokenizers==0.22.2 numpy==2.2.6
)

if [[ "${1:-}" == "--prepare" ]]; then
  exclude=$(git rev-parse --git-path info/exclude)
  grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
  platforms=()
  for n in 2_28 2_27 2_17 2_5; do platforms+=(--platform "manylinux_${n}_x86_64"); done
  for dest in .whl .whl/lerobot; do
    if [[ $dest == .whl ]]; then wheels=("${WHEELS[@]}"); else wheels=("${LEROBOT_WHEELS[@]}"); fi
    "${PIP_PYTHON:-python3}" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp "${platforms[@]}" --platform manylinux2014_x86_64 -d "$dest" "${wheels[@]}"
  done
  ls -l .whl .whl/lerobot
  du -sh .whl
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

lerobot=(--lerobot-python "${PDE_LEROBOT_PYTHON:-$PY}")
if [[ -z "${PDE_LEROBOT_PYTHON:-}" ]] && compgen -G ".whl/lerobot/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/pde-gpu-session-lerobot .whl/lerobot/*.whl
  lerobot+=(--lerobot-path /tmp/pde-gpu-session-lerobot)
fi

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
started=$(mktemp)
status=0
timeout "${PDE_GPU_SESSION_TIMEOUT_S:-450}" "$PY" bench/bench_pi05.py --parts latency,lerobot,loop-memory --latency-runs 100 --slow-runs 20 \
  --lerobot-runs 20 --variants eager,fast,fast_graphs_unfused,fast_graphs,fast_graphs_compiled \
  "${lerobot[@]}" --out auto "$@" || status=$?
if [[ -n "${OUT:-}" ]]; then
  find bench/results -maxdepth 1 -name 'pi05_*.json' -newer "$started" -exec cp {} "$OUT"/ \;
fi
exit "$status"
