#!/usr/bin/env bash
# `make seed-table`: the seed study's batch table in miniature on the realistic synthetic
# archive (4,000 v2 patches, the one `make demo` trains on): the tiny CNN for the same
# epochs at global batch 16, 64, 256 and 1024 (64x; 2 ranks, at most 128 per rank, so 1024
# accumulates 4 passes), with SGD (linear LR scaling, warm-up) and with LAMB.
# Writes $SEED_TABLE_DIR/seed_table.csv and seed_table.html; a rerun resumes.
set -euo pipefail

VENV=${VENV:-.venv}
SEED_TABLE_DIR=${SEED_TABLE_DIR:-seed-table}
bin="$VENV/bin"
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-1}
data="$SEED_TABLE_DIR/data"

if [[ ! -f $data/shards/manifest.json ]]; then
  "$bin/bigearthnet-synth" "$data/archive" --patches 4000 --layout v2 --seed 0 --workers 2 \
    --overwrite
  "$bin/bigearthnet-preprocess" "$data/archive" "$data/shards" --workers 2 --shard-size 250 \
    --overwrite --no-progress
fi
"$bin/python" -m bigearthnet.cli.seed_table --data "$data/shards" --out "$SEED_TABLE_DIR" \
  --batches 16,64,256,1024 --epochs 10 --ranks 2 --max-rank-batch 128 --target-f1 0.55 \
  -- --model tiny --threads 1
