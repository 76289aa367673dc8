#!/usr/bin/env bash
# `make demo`: the whole product on an embedded default, on one machine.
#   synthetic archive -> preprocess (2 workers) -> train on 2 Horovod ranks -> parallel
#   evaluation on 2 ranks -> export (SavedModel, ONNX, card, STAC) -> land-cover maps from the
#   export: the test patches, a synthetic Sentinel-2 L2A scene at 10 m (and at 600 m, to
#   compare) and a region's series over time at 20 m (4 tiles in two UTM zones x 6 dates)
#   -> where to look. Each step says how long it took; the last line, every step's time.
# Every step is the command a user runs on real data; only the archive is synthetic.
set -euo pipefail

VENV=${VENV:-.venv}
DEMO_DIR=${DEMO_DIR:-demo}
PATCHES=${DEMO_PATCHES:-4000}
bin="$VENV/bin"
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-1}

# Each step's wall time, printed when the next starts and together at the end.
step_name="" step_start=$SECONDS times=""
step_done() {
  if [ -n "$step_name" ]; then
    printf '   (step %s: %d s)\n' "$step_name" $((SECONDS - step_start))
    times="$times $step_name $((SECONDS - step_start)) s,"
  fi
}
step() {
  step_done
  step_name=${1%% *} step_start=$SECONDS
  printf '\n== %s\n' "$*"
}

step "1/8 synthetic BigEarthNet v2 (reBEN) archive, as hard as the real one: $PATCHES patches -> $DEMO_DIR/archive"
# reBEN's label statistics and CORINE-like label noise (the pixels' truth in truth.parquet);
# the snowy and cloudy patches go to the side file, as in reBEN, and are not trained on.
"$bin/bigearthnet-synth" "$DEMO_DIR/archive" --patches "$PATCHES" --layout v2 --seed 0 \
  --workers 2 --overwrite

step "2/8 preprocess -> $DEMO_DIR/shards (HDF5 shards + manifest.json)"
"$bin/bigearthnet-preprocess" "$DEMO_DIR/archive" "$DEMO_DIR/shards" --workers 2 \
  --shard-size 100 --overwrite --no-progress

step "3/8 train the tiny CNN and its dense head on 2 Horovod ranks (configs/demo.yaml) -> $DEMO_DIR/run"
# The shards hold reference maps, so the dense head (land cover per 10 m pixel) trains beside
# the multi-label head (--pixel-loss-weight 0.1 by default).
# --no-resume: a second `make demo` starts over instead of finding the run finished.
"$bin/horovodrun" -np 2 -H localhost:2 --gloo "$bin/python" train.py \
  --config configs/demo.yaml --data "$DEMO_DIR/shards" --run-dir "$DEMO_DIR/run" \
  --no-resume --no-eval-test

step "4/8 evaluate the best checkpoint on the test split, 2 ranks -> $DEMO_DIR/run/eval-test"
"$bin/horovodrun" -np 2 -H localhost:2 --gloo "$bin/python" evaluate.py \
  --run-dir "$DEMO_DIR/run" --split test

step "5/8 export the best checkpoint -> $DEMO_DIR/export (SavedModel, ONNX, model card, STAC item)"
"$bin/bigearthnet-export" "$DEMO_DIR/run" --out "$DEMO_DIR/export" --overwrite

# Maps go under the run folder, so its page (report.html) shows them: the scene maps in its
# map viewer, the others as previews.
maps="$DEMO_DIR/run/maps"
step "6/8 land-cover maps of the test shards, from the export alone -> $maps/patches"
"$bin/bigearthnet-map" --model "$DEMO_DIR/export" --shards "$DEMO_DIR/shards" --split test \
  --out "$maps/patches" --no-progress

step "7/8 a synthetic Sentinel-2 L2A scene (JPEG 2000 bands) -> its land-cover map at 10 m $maps/scene.tif"
rm -rf "$DEMO_DIR/scene.SAFE"
"$bin/bigearthnet-synth" scene "$DEMO_DIR/scene.SAFE" --blocks 3
# 10 m from the dense head (the default for a model with one); beside it the classifier's
# 600 m cells (--stride 60), which the run's page shows in the same view: the difference.
"$bin/bigearthnet-map" scene "$DEMO_DIR/scene.SAFE" --model "$DEMO_DIR/export" \
  --out "$maps/scene.tif" --no-progress
"$bin/bigearthnet-map" scene "$DEMO_DIR/scene.SAFE" --model "$DEMO_DIR/export" \
  --out "$maps/scene-600m.tif" --stride 60 --no-progress

step "8/8 a region over time at 20 m: 4 tiles in UTM 32/33 x 6 dates -> its series $DEMO_DIR/region"
# --layout mixed: the scenes come as SAFE products, EOPF Zarr products, STAC items with COGs
# (Earth Search's and Planetary Computer's style) and band GeoTIFFs, in turn.
rm -rf "$DEMO_DIR/region-scenes" "$DEMO_DIR/region"  # a fresh region, mapped afresh
"$bin/bigearthnet-synth" region "$DEMO_DIR/region-scenes" --tiles 4 --dates 6 --size 480 \
  --block 2400 --layout mixed
# Each scene mapped at 10 m, the series on 20 m cells: 433 x 436 cells, every one on its page.
"$bin/bigearthnet-map" region "$DEMO_DIR"/region-scenes/scenes/* --model "$DEMO_DIR/export" \
  --out "$DEMO_DIR/region" --period scene-date --cell 20 --no-progress
"$bin/bigearthnet-synth" score "$DEMO_DIR/region-scenes" "$DEMO_DIR/region"
# The run's page again, now with the maps and a link to the region's page (which links back).
"$bin/bigearthnet-report" "$DEMO_DIR/run" >/dev/null

step "report"
cat <<MSG
  training history   $DEMO_DIR/run/history.csv  (curves: $DEMO_DIR/run/eval-test/training_curves.png)
  efficiency report  $DEMO_DIR/run/efficiency.json
  test metrics       $DEMO_DIR/run/eval-test/metrics.json, per_class.csv, *.png
  exported model     $DEMO_DIR/export/model_card.md, savedmodel/, model.onnx, item.json
  maps               $maps/patches/*.tif (GeoTIFF) and *.png previews; the scene at 10 m:
                     $maps/scene.tif (areas per class in scene.tif.areas.csv), beside
                     it at 600 m $maps/scene-600m.tif: both in the run's page's viewer
  region series      $DEMO_DIR/region/region.html (20 m: periods, areas, changes), periods/,
                     consistent/, stac/collection.json, consistency.json
MSG
"$bin/python" - "$DEMO_DIR/run/eval-test/metrics.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
print(f"  test micro-F1 {m['micro_f1']:.3f}  macro-F1 {m['macro_f1']:.3f}  "
      f"micro-mAP {m['micro_map']:.3f}  on {m['count']} patches ({m['world_size']} ranks); "
      f"the best constant answer: micro-F1 {m['constant_micro_f1']:.3f}")
PY
echo "  the run's page     $DEMO_DIR/run/report.html  (open it in a browser: everything above)"
step_done
printf '  the steps took:%s %d s in all\n' "${times%,};" "$SECONDS"
# The commands live in the venv, not on a plain shell's PATH (bigearthnet-report: command not
# found): say how to reach them, with the prefix that works from this folder.
printf '\n  the commands are in %s/, not on PATH: "source %s/activate" puts them there for\n' \
  "$bin" "$bin"
printf '  this shell, or give the prefix:\n'
printf '    %-44s # %s\n' \
  "$bin/bigearthnet-report $DEMO_DIR/run" "the run's page, written again" \
  "$bin/bigearthnet-map scene --help" "map a scene of yours with $DEMO_DIR/export" \
  "$bin/python train.py --help" "train on shards of yours"
