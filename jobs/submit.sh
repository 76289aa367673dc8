#!/usr/bin/env bash
# Submit one step with the site's sbatch settings (account, partition, tasks, CPUs, GPUs):
#   SITE=<profile> jobs/submit.sh STEP [sbatch option...] [-- step argument...]
#   jobs/submit.sh --help
# STEP is preprocess, train, train_gloo, evaluate, batch_study, seed_table, map_scene, map_region or
# elastic/train_elastic (jobs/STEP.sbatch).
# sbatch options given here come after the site's and win; step arguments go to the script
# (e.g. train.py flags).
# Prints what sbatch prints, so with --parsable steps chain:
#   jid=$(SITE=local jobs/submit.sh preprocess --parsable)
#   SITE=local EXPERIMENT=r50 jobs/submit.sh train --dependency=afterok:$jid
set -euo pipefail
BEN_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$BEN_REPO/jobs/common.sh"
BEN_STEP=submit

# The steps a user submits: the job scripts in jobs/, and the elastic run's.
steps() {
  local f names=()
  for f in "$BEN_REPO"/jobs/*.sbatch; do names+=("$(basename "$f" .sbatch)"); done
  names+=(elastic/train_elastic)
  local IFS='|'
  echo "${names[*]}"
}
usage="usage: SITE=<profile> jobs/submit.sh $(steps) [sbatch options] [-- step arguments]"
help() {
  cat <<EOF
$usage

Submit one step (jobs/STEP.sbatch) with the sbatch settings of the site profile
jobs/sites/\$SITE.env (account, partition, tasks, CPUs, GPUs); sbatch options given here come
after the site's and win; arguments after -- go to the step's program (e.g. train.py flags).
Prints what sbatch prints, so with --parsable steps chain. Profiles: $(site_names).

examples:
  export SITE=local
  jobs/submit.sh preprocess -- --shard-size 1000
  jid=\$(jobs/submit.sh preprocess --parsable)
  EXPERIMENT=r50 jobs/submit.sh train --dependency=afterok:\$jid -- --epochs 50

The steps' variables (DATA_DIR, EXPERIMENT, ...): jobs/README.md.
EOF
}
(($#)) || die "no STEP given; $usage"
if [[ $1 == -h || $1 == --help ]]; then
  help
  exit 0
fi
[[ $1 != -* ]] || die "$1: the STEP comes first (jobs/submit.sh --help); $usage"
script=$BEN_REPO/jobs/$1.sbatch
[[ -f $script ]] || die "no job script jobs/$1.sbatch; $usage"
step=$1
shift
sbatch_opts=()
while (($#)); do
  if [[ $1 == -- ]]; then
    shift
    break
  fi
  sbatch_opts+=("$1")
  shift
done

load_site
site_opts=()
if [[ -n ${SITE_ACCOUNT:-} ]]; then site_opts+=("--account=$SITE_ACCOUNT"); fi
if [[ $step == preprocess ]]; then
  require_vars SITE_CPU_PARTITION PREPROCESS_TASKS PREPROCESS_CPUS_PER_TASK
  site_opts+=("--partition=$SITE_CPU_PARTITION" "--ntasks=$PREPROCESS_TASKS"
    "--cpus-per-task=$PREPROCESS_CPUS_PER_TASK")
else
  require_vars SITE_PARTITION TASKS_PER_NODE CORES_PER_NODE
  : "${CPUS_PER_TASK:=$((CORES_PER_NODE / TASKS_PER_NODE))}" # the node's cores, shared
  read -r -a gpu_opts <<<"${SITE_GPU_OPTIONS:-}"
  site_opts+=("--partition=$SITE_PARTITION" "--ntasks-per-node=$TASKS_PER_NODE"
    "--cpus-per-task=$CPUS_PER_TASK" "${gpu_opts[@]}")
fi

# sbatch does not create the folder of --output (logs/%x-%j.out, relative to here): without
# it the job runs, fails to open its log, and leaves no trace.
mkdir -p logs
export BEN_REPO SITE # the job finds the repository and the profile through these
log "SITE=$SITE sbatch ${site_opts[*]} ${sbatch_opts[*]} jobs/$step.sbatch $*" >&2
exec sbatch "${site_opts[@]}" "${sbatch_opts[@]}" "$script" "$@"
