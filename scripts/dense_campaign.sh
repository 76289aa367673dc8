#!/usr/bin/env bash
# Issue 49, item 5: the dense head measured on the demo's archive (4,000 realistic v2
# patches, seed 0, with the CORINE-like reference maps and the truth), with the demo's
# recipe (configs/demo.yaml: Adam, LR 0.005 per rank, batch 16 per rank, 1 warm-up epoch):
#   - the tiny CNN, 15 epochs, 2 Horovod ranks (the demo itself), with the head
#     (--pixel-loss-weight 0.1, the default on shards with maps) and without it (0), for each
#     seed of $SEEDS;
#   - ResNet-50, 1 rank passing 2 batches of 16 per update (the demo's global batch 32 and
#     its LR schedule: 0.005 -> 0.01 over the warm-up epoch), $RESNET_EPOCHS epochs (8, as
#     measured in docs/training.md; RESNET_STEPS=N cuts each to N batches: half as many
#     updates), with and without the head, one after the other (RESNET_EPOCHS=0 skips it);
#   - the tiny CNN without the head on an archive from the generator before issue 49's
#     co-occurrence refit (commit $REFIT_BASE, `git archive`d to a folder of its own; the
#     shards made by today's preprocessing), to tell the refit from the head
#     (REFIT_BASE= skips it);
#   - every run's best checkpoint scored on the test split by evaluate.py (multi-label
#     figures, and the dense head's per pixel against the reference maps and the truth).
# Everything runs under `nice -n 19` (a shared machine). A run folder that already holds a
# finished evaluation is kept: a rerun measures only what is missing. Ends with the table
# (micro-F1, macro-F1, micro-mAP, pixel OA / mIoU against the maps and the truth, wall time).
set -euo pipefail

VENV=${VENV:-.venv}
CAMPAIGN_DIR=${CAMPAIGN_DIR:-campaign}
SEEDS=${SEEDS:-42 1}
TINY_EPOCHS=${TINY_EPOCHS:-15}
RESNET_EPOCHS=${RESNET_EPOCHS:-8}
RESNET_STEPS=${RESNET_STEPS:-}          # batches of 16 per epoch; empty: whole epochs (109)
RESNET_PRECISE_BN=${RESNET_PRECISE_BN:-512}
REFIT_BASE=${REFIT_BASE-7833c2e}         # the parent of 34ef662, "Landscapes fitted to reBEN's pair correlations"
bin="$VENV/bin"
run() { nice -n 19 "$@"; }
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-1}

# archive_and_shards NAME SYNTH-COMMAND...: the demo's archive (4,000 v2 patches, seed 0) made
# by the given generator, preprocessed as the demo does, unless its shards are there.
archive_and_shards() {
  local name=$1
  shift
  [[ -f $CAMPAIGN_DIR/$name-shards/manifest.json ]] && return 0
  rm -rf "$CAMPAIGN_DIR/$name-archive"
  run "$@" "$CAMPAIGN_DIR/$name-archive" --patches 4000 --layout v2 --seed 0 --workers 2
  run "$bin/bigearthnet-preprocess" "$CAMPAIGN_DIR/$name-archive" "$CAMPAIGN_DIR/$name-shards" \
    --workers 2 --shard-size 100 --overwrite --no-progress
}

# train_and_score RUN NP SHARDS TRAIN-OPTIONS...: train (unless already scored), then
# evaluate.py on the test split; the wall time of the training goes to RUN.seconds.
train_and_score() {
  local dir=$1 np=$2 shards=$3
  shift 3
  [[ -f $dir/eval-test/metrics.json ]] && return 0
  local start=$SECONDS
  run "$bin/horovodrun" -np "$np" -H "localhost:$np" --gloo "$bin/python" train.py \
    --data "$shards" --run-dir "$dir" --no-resume --no-eval-test --no-progress "$@"
  echo $((SECONDS - start)) >"$dir.seconds"
  run "$bin/python" evaluate.py --run-dir "$dir" --split test
}

archive_and_shards today "$bin/bigearthnet-synth"
shards="$CAMPAIGN_DIR/today-shards"
for seed in $SEEDS; do
  for weight in 0.1 0; do
    train_and_score "$CAMPAIGN_DIR/tiny-w$weight-s$seed" 2 "$shards" --config configs/demo.yaml \
      --epochs "$TINY_EPOCHS" --seed "$seed" --pixel-loss-weight "$weight"
  done
done

if ((RESNET_EPOCHS > 0)); then
  for weight in 0.1 0; do
    train_and_score "$CAMPAIGN_DIR/resnet50-w$weight-s42" 1 "$shards" --config configs/demo.yaml \
      --model resnet50 --threads 1 --backward-passes-per-step 2 --epochs "$RESNET_EPOCHS" \
      ${RESNET_STEPS:+--max-steps-per-epoch "$RESNET_STEPS"} --precise-bn-samples "$RESNET_PRECISE_BN" \
      --seed 42 --pixel-loss-weight "$weight"
  done
fi

if [[ -n $REFIT_BASE ]]; then
  generator="$CAMPAIGN_DIR/generator-$REFIT_BASE"
  if [[ ! -d $generator ]]; then
    mkdir -p "$generator.partial"
    git archive "$REFIT_BASE" | tar -x -C "$generator.partial"
    mv "$generator.partial" "$generator"
  fi
  # -P: the working folder (this checkout) must not come before the old generator on sys.path
  archive_and_shards "$REFIT_BASE" env PYTHONPATH="$generator" "$bin/python" -P -c \
    'import sys; from bigearthnet.cli.synth import main; sys.exit(main(sys.argv[1:]))'
  train_and_score "$CAMPAIGN_DIR/oldgen-tiny-w0-s42" 2 "$CAMPAIGN_DIR/$REFIT_BASE-shards" \
    --config configs/demo.yaml --epochs "$TINY_EPOCHS" --seed 42 --pixel-loss-weight 0
fi

"$bin/python" - "$CAMPAIGN_DIR" <<'PY'
import json, pathlib, sys
root = pathlib.Path(sys.argv[1])
def fig(m, key):
    return f"{m[key]:.3f}" if key in m else "-"
print("| run | micro-F1 | macro-F1 | micro-mAP | pixel OA / mIoU, maps | pixel OA / mIoU, truth | training |")
print("|---|---|---|---|---|---|---|")
for metrics in sorted(root.glob("*/eval-test/metrics.json")):
    run = metrics.parent.parent
    m = json.loads(metrics.read_text())
    seconds = run.parent / f"{run.name}.seconds"
    minutes = f"{int(seconds.read_text()) / 60:.1f} min" if seconds.exists() else "-"
    print(f"| {run.name} | {fig(m, 'micro_f1')} | {fig(m, 'macro_f1')} | {fig(m, 'micro_map')} "
          f"| {fig(m, 'pixel_overall_accuracy')} / {fig(m, 'pixel_miou')} "
          f"| {fig(m, 'pixel_truth_overall_accuracy')} / {fig(m, 'pixel_truth_miou')} | {minutes} |")
PY
