#!/usr/bin/env bash
# The language premise (issue 11 item 3): a multi-task SFT start whose target task fails under its
# canonical prompt and succeeds under other wordings.
#
#   scripts/premise.sh [DATA_DIR]        # default data/premise; ~2 min demos, ~2 min SFT, ~20 min eval
#
# 1. 20 scripted demos per task of three tasks of one scene (kept: skipped when already there);
# 2. Gaussian-head SFT (32 px, 1000 steps of batch 64) with the wording table
#    learner/recipes/language_premise.json (cached: re-used when demos and settings are unchanged);
# 3. the target's sampled success per prompt on scenes 5000..5049 -> bench/results/premise.json
#    (SKIP_EVAL=1 skips it; EPISODES=N changes the scene count).
# The SFT checkpoint is DATA_DIR/checkpoints/policy-000000.pt.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-data/premise}
PY=${PYTHON:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
TASKS=put_green_container_in_bowl,put_bowl_in_front_of_camera,put_green_container_in_front_of_camera
WORDINGS=learner/recipes/language_premise.json

RECORD=("$PY" -m pde sim record --tasks "$TASKS" --episodes-per-task 20 --seed 1000
  --image-size 128x128 --layout-spread 0.2 --out "$DATA/demos")
SFT=("$PY" -m pde learner sft --demos "$DATA/demos" --checkpoints "$DATA/checkpoints" --per-task 20
  --steps 1000 --batch-size 64 --head gaussian --image-size 32 --seed 0 --device cpu
  --wordings "$WORDINGS")

if [ "$(find "$DATA/demos" -type f 2>/dev/null | wc -l)" -ge 60 ]; then
  echo "demos: $DATA/demos already holds 60 episodes (delete it to record again)"
else
  "${RECORD[@]}"
fi
"${SFT[@]}"
if [ "${SKIP_EVAL:-0}" != 1 ]; then
  "$PY" bench/bench_premise.py --checkpoint "$DATA/checkpoints/policy-000000.pt" --wordings "$WORDINGS" \
    --episodes "${EPISODES:-50}" --seed 5000 --log-dir "$DATA" \
    --recipe-command "${RECORD[*]}" --recipe-command "${SFT[*]}"
fi
