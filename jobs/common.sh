# shellcheck shell=bash
# Functions shared by the job scripts in jobs/ and by jobs/submit.sh. Sourced, never run.
#
# Site settings live in jobs/sites/$SITE.env; a profile only assigns variables, with
# `: "${VAR:=default}"` wherever a value exported before submitting should win (sbatch
# passes the submitting environment on to the job). See jobs/README.md.

# Slurm runs a *copy* of a batch script from its spool directory, so a job cannot find the
# repository from its own path: jobs/submit.sh exports BEN_REPO, else the job assumes it
# was submitted from the repository root.
BEN_REPO=${BEN_REPO:-${SLURM_SUBMIT_DIR:-$PWD}}
export BEN_REPO

log() { printf '%s [%s] %s\n' "$(date +%H:%M:%S)" "${BEN_STEP:-job}" "$*"; }

# die MESSAGE [CODE]: one clear line in the job log, then exit (2: bad input, nothing ran).
die() {
  printf '%s [%s] ERROR: %s\n' "$(date +%H:%M:%S)" "${BEN_STEP:-job}" "$1" >&2
  exit "${2:-2}"
}

site_names() {
  local f names=()
  for f in "$BEN_REPO"/jobs/sites/*.env; do
    [[ -e $f ]] && names+=("$(basename "$f" .env)")
  done
  echo "${names[*]:-none}"
}

# load_site: source jobs/sites/$SITE.env; a missing SITE or profile stops the job at once.
load_site() {
  [[ -f $BEN_REPO/jobs/common.sh ]] ||
    die "BEN_REPO=$BEN_REPO is not the bigearthnet-hpc repository: submit with jobs/submit.sh, from the repository root, or export BEN_REPO"
  [[ -n ${SITE:-} ]] ||
    die "SITE is not set: export SITE=<profile> before submitting (profiles: $(site_names))"
  local profile=$BEN_REPO/jobs/sites/$SITE.env
  [[ -f $profile ]] ||
    die "site profile $profile not found (SITE=$SITE; profiles: $(site_names))"
  # shellcheck source=/dev/null  # one of jobs/sites/*.env, chosen at run time
  source "$profile"
}

# require_vars VAR...: each must be set and non-empty.
require_vars() {
  local var
  for var in "$@"; do
    [[ -n ${!var:-} ]] ||
      die "$var is not set: set it in jobs/sites/${SITE:-<site>}.env or export $var=... before submitting"
  done
}

# require_count VAR...: each is set and a whole number >= 1 (ranks, slots, seconds).
require_count() {
  local var
  require_vars "$@"
  for var in "$@"; do
    [[ ${!var} =~ ^[1-9][0-9]*$ ]] || die "$var=${!var}: expected a whole number >= 1"
  done
}

# require_dir VAR [FILE]: the folder named by VAR exists (and holds FILE).
require_dir() {
  local var=$1 file=${2:-}
  require_vars "$var"
  [[ -d ${!var} ]] || die "$var=${!var}: no such folder"
  [[ -z $file || -e ${!var}/$file ]] || die "$var=${!var}: no $file in it"
}

# activate_env: the site's modules, then the project's virtual environment.
activate_env() {
  if [[ -n ${SITE_MODULES:-} ]]; then
    command -v module >/dev/null 2>&1 || die "SITE_MODULES is set but there is no 'module' command"
    local modules
    read -r -a modules <<<"$SITE_MODULES"
    set +u # Lmod's and Environment Modules' shell functions are not written for `set -u`
    module purge
    module load "${modules[@]}" || die "module load ${modules[*]} failed"
    set -u
  fi
  require_vars VENV
  [[ -x $VENV/bin/python ]] || die "VENV=$VENV: no bin/python there (run 'make setup' first)"
  # PATH rather than bin/activate: activate is not written for `set -u`.
  export VIRTUAL_ENV=$VENV PATH=$VENV/bin:$PATH
  # Slurm >= 22.05: srun no longer inherits --cpus-per-task from the allocation.
  if [[ -n ${SLURM_CPUS_PER_TASK:-} ]]; then
    export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
  fi
}

# job_setup STEP: what every job script does first.
job_setup() {
  BEN_STEP=$1
  load_site
  activate_env
}

# log_job_info VAR...: where and what this job runs, so that a log alone explains a result.
log_job_info() {
  local revision var
  log "job ${SLURM_JOB_ID:-none} (${SLURM_JOB_NAME:-}) restart ${SLURM_RESTART_COUNT:-0}" \
    "on site $SITE: ${SLURM_JOB_NUM_NODES:-1} node(s), ${SLURM_NTASKS:-1} task(s)," \
    "${SLURM_CPUS_PER_TASK:-?} CPU(s) per task"
  log "hosts: $(scontrol show hostnames "${SLURM_JOB_NODELIST:-$(hostname -s)}" 2>/dev/null |
    paste -sd ' ' || hostname -s)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    log "GPUs on $(hostname -s): $(nvidia-smi -L 2>&1 | paste -sd ';')"
  elif command -v rocm-smi >/dev/null 2>&1; then
    log "GPUs on $(hostname -s): $(rocm-smi --showproductname 2>&1 | grep -i 'card series' | paste -sd ';')"
  else
    log "GPUs on $(hostname -s): none (no nvidia-smi or rocm-smi)"
  fi
  revision=$(git -C "$BEN_REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [[ $revision != unknown ]] && [[ -n $(git -C "$BEN_REPO" status --porcelain -uno 2>/dev/null) ]]; then
    revision+=" (with uncommitted changes)"
  fi
  log "git revision: $revision of $BEN_REPO"
  log "python: $(command -v python) ($(python --version 2>&1))"
  for var in "$@"; do
    log "config: $var=${!var:-}"
  done
}

# show_file FILE: a file's lines in the log, indented (e.g. the run's resolved config.yaml).
show_file() {
  [[ -f $1 ]] && sed 's/^/    /' "$1"
  return 0
}

# resolve_run_dir: RUN_DIR, else $RUNS_DIR/$EXPERIMENT - one folder per experiment, so a
# resubmitted (or requeued) job finds its checkpoints and resumes. EXPERIMENT defaults to
# the name of TRAIN_CONFIG (configs/resnet50.yaml -> resnet50).
resolve_run_dir() {
  if [[ -z ${RUN_DIR:-} ]]; then
    if [[ -z ${EXPERIMENT:-} && -n ${TRAIN_CONFIG:-} ]]; then
      EXPERIMENT=$(basename "${TRAIN_CONFIG%.*}")
    fi
    require_vars RUNS_DIR EXPERIMENT
    # shellcheck disable=SC2153  # RUNS_DIR comes from the site profile, not a typo of RUN_DIR
    RUN_DIR=$RUNS_DIR/$EXPERIMENT
  fi
}

# training_command ARG...: TRAIN_CMD, train.py on the site's data; ARGs (the job script's
# arguments) come last and so override the defaults.
training_command() {
  require_dir DATA_DIR manifest.json
  resolve_run_dir
  TRAIN_CMD=(python "$BEN_REPO/train.py" --data "$DATA_DIR" --run-dir "$RUN_DIR"
    --threads "${SLURM_CPUS_PER_TASK:-1}" --no-progress)
  if [[ -n ${TRAIN_CONFIG:-} ]]; then
    [[ -f $TRAIN_CONFIG ]] || die "TRAIN_CONFIG=$TRAIN_CONFIG: no such file"
    TRAIN_CMD+=(--config "$TRAIN_CONFIG")
  fi
  TRAIN_CMD+=("$@")
}

# job_host_slots: one `host:slots` line per node of the allocation, one slot per task.
job_host_slots() {
  require_vars SLURM_JOB_NODELIST SLURM_NTASKS_PER_NODE
  scontrol show hostnames "$SLURM_JOB_NODELIST" | sed "s/\$/:$SLURM_NTASKS_PER_NODE/"
}

# remove_on_exit FILE...: delete the FILEs when the script ends, however it ends (bash runs
# the EXIT trap on `exit`, on an error under `set -e` and on SIGTERM).
BEN_REMOVE=()
remove_on_exit() {
  BEN_REMOVE+=("$@")
  trap 'rm -f -- "${BEN_REMOVE[@]}"' EXIT
}

# srun_options: the site's MPI plugin and CPU binding for parallel steps, in SRUN_OPTS.
srun_options() {
  # A task that dies ends the step at once (its peers would only fail at the next
  # collective); the job log then says which task it was.
  SRUN_OPTS=(--kill-on-bad-exit=1)
  if [[ -n ${SRUN_MPI:-} ]]; then SRUN_OPTS+=("--mpi=$SRUN_MPI"); fi
  if [[ -n ${CPU_BIND:-} ]]; then SRUN_OPTS+=("--cpu-bind=$CPU_BIND"); fi
}

# --------------------------------------------------------------------------- signals
# Training jobs ask for `#SBATCH --signal=B:USR1@T`: Slurm sends SIGUSR1 to this batch
# shell T seconds (give or take a minute) before the time limit. The shell passes it on to
# the training step, which checkpoints mid-epoch and exits with EXIT_REQUEUE; the job then
# requeues itself and the next run resumes. Bash runs a trap only between commands, so the
# step runs in the background while the shell waits.

EXIT_REQUEUE=3 # train.py: stopped on a signal after writing a checkpoint
BEN_GOT_USR1=0
BEN_STEP_PID=
BEN_FORWARD=
# Installed right away: bash's default action for SIGUSR1 would end the job script.
trap 'on_usr1' USR1

on_usr1() {
  BEN_GOT_USR1=1
  log "SIGUSR1: time limit near, asking the training step to checkpoint and stop"
  if [[ -n $BEN_STEP_PID ]]; then "$BEN_FORWARD" "$BEN_STEP_PID"; fi
}

# forward_to_srun PID: SIGUSR1 to the srun at or below PID (srun_step runs it in a pipeline);
# srun passes it on to every task of its step. Never to the shells between: it would end them.
forward_to_srun() {
  local pid
  for pid in "$1" $(descendants "$1"); do
    if [[ $(ps -o comm= -p "$pid" 2>/dev/null) == srun ]]; then
      kill -USR1 "$pid" 2>/dev/null || true
    fi
  done
}

# forward_to_workers PID: SIGUSR1 to the training processes below PID (horovodrun's ranks
# on this node): Python processes running $BEN_REPO/train.py. Not to horovodrun or its
# helper processes (also Python): SIGUSR1 would kill them. Ranks on other nodes (started
# over ssh) are not reached; train.py stops all ranks together when any one is signalled.
forward_to_workers() {
  local pid
  for pid in $(descendants "$1"); do
    if [[ $(ps -o comm= -p "$pid" 2>/dev/null) == python* &&
      $(ps -o args= -p "$pid" 2>/dev/null) == *" $BEN_REPO/train.py"* ]]; then
      kill -USR1 "$pid" 2>/dev/null || true
    fi
  done
}

descendants() {
  local child
  for child in $(pgrep -P "$1"); do
    echo "$child"
    descendants "$child"
  done
}

# run_step FORWARDER COMMAND...: run COMMAND, pass SIGUSR1 on through FORWARDER while it
# runs, and return its exit code.
run_step() {
  BEN_FORWARD=$1
  shift
  "$@" &
  BEN_STEP_PID=$!
  if ((BEN_GOT_USR1)); then "$BEN_FORWARD" "$BEN_STEP_PID"; fi # came before the step did
  # `wait` also returns when a trap ran; wait again until the step has really ended.
  while kill -0 "$BEN_STEP_PID" 2>/dev/null; do
    wait "$BEN_STEP_PID" || true
  done
  local rc=0
  wait "$BEN_STEP_PID" || rc=$?
  BEN_STEP_PID=
  return "$rc"
}

# srun_step SRUN_ARG...: `srun SRUN_ARG...`, its output in the log, failed when its tasks
# could not be started. Slurm 22.05's srun prints "task N launch failed" and still exits 0
# (seen when the node's PMIx plugin could not make its folder), so a job that trusted the 0
# ended COMPLETED with nothing run. A launch failure is retried as a new step, up to
# STEP_LAUNCH_TRIES tries in all: the commands run this way resume or rewrite their outputs.
STEP_LAUNCH_FAILED='^srun: error: task [0-9]+ launch failed'
srun_step() {
  local out try rc tries=${STEP_LAUNCH_TRIES:-2}
  out=$(mktemp "${TMPDIR:-/tmp}/ben-srun.XXXXXX")
  remove_on_exit "$out"
  for ((try = 1; ; try++)); do
    rc=0
    output_to "$out" srun "$@" || rc=$?
    grep -Eq "$STEP_LAUNCH_FAILED" "$out" || return "$rc"
    if ((try >= tries)); then
      log "srun could not start the step's tasks (try $try of $tries): see slurmd's log on ${SLURMD_NODENAME:-the node}"
      return $((rc ? rc : 1))
    fi
    log "srun could not start the step's tasks (try $try of $tries): a new step in 10 s"
    sleep 10
  done
}

# run_horovodrun COMMAND...: run a horovodrun command line as the training step (SIGUSR1
# passed on to its ranks on this node), keep a copy of its output in the file HVD_OUT, and
# return the first failing rank's exit code: horovodrun itself exits 1 whatever its ranks
# returned, and reports the first failing rank's code as "Exit code: N".
run_horovodrun() {
  HVD_OUT=$(mktemp "${TMPDIR:-/tmp}/ben-horovodrun.XXXXXX")
  remove_on_exit "$HVD_OUT"
  local rc=0 first_code
  run_step forward_to_workers output_to "$HVD_OUT" "$@" || rc=$?
  first_code=$(sed -n 's/^Exit code: \([0-9]*\)$/\1/p' "$HVD_OUT" | head -n 1)
  if ((rc != 0)) && [[ -n $first_code ]]; then rc=$first_code; fi
  return "$rc"
}

# output_to FILE COMMAND...: COMMAND's output to the log and to FILE; COMMAND's exit code
# (the scripts set pipefail).
output_to() {
  local file=$1
  shift
  "$@" 2>&1 | tee "$file"
}

# finish_training RC: the job's end after a training step exited with RC. Requeue only when
# the step checkpointed because of *our* warning signal; a SIGTERM (scancel, preemption,
# the time limit itself) also makes train.py exit 3, but then Slurm decides.
finish_training() {
  local rc=$1
  if ((rc == 0)); then
    # train.py exits 0 only after rank 0 wrote how the run ended (bigearthnet/formats/
    # run_status.py): a 0 without that file is a step that never ran train.py to its end.
    [[ -f $RUN_DIR/status.json ]] ||
      die "the training step exited 0 without ending the run (no $RUN_DIR/status.json): see the lines above" 1
    log "training finished"
    return 0
  fi
  if ((rc == EXIT_REQUEUE && BEN_GOT_USR1)); then
    local restarts=${SLURM_RESTART_COUNT:-0}
    if ((restarts >= ${MAX_REQUEUES:-20})); then
      die "checkpointed, but not requeued: already restarted $restarts times (MAX_REQUEUES)" 1
    fi
    log "checkpoint written; requeueing job $SLURM_JOB_ID to resume (restart $((restarts + 1)))"
    scontrol requeue "$SLURM_JOB_ID" || die "scontrol requeue $SLURM_JOB_ID failed" 1
    # Slurm now ends this run of the script; the requeued job starts from the top.
    exit 0
  fi
  if ((rc == EXIT_REQUEUE)); then
    die "training checkpointed and stopped on SIGTERM (cancelled, preempted or out of time): resubmit with the same EXPERIMENT to resume" "$rc"
  fi
  case $rc in
  2) die "training rejected its input or options (exit 2): see the lines above" 2 ;;
  *) die "training failed with exit code $rc: see the lines above" "$rc" ;;
  esac
}

# --------------------------------------------------------------------------- elastic
# An elastic run (jobs/elastic/) has a hosts folder, ELASTIC_HOSTS_DIR, with one file per job
# that lends it nodes: <job id>.hosts, lines `host:slots`. horovodrun's discovery script
# (jobs/elastic/discover_hosts.sh) reads the folder every second: a file that appears grows
# the training, one that disappears shrinks it.

# register_hosts LINE...: write this job's file under a temporary name and rename it (atomic:
# discovery never reads half a file); it is removed when the script ends.
register_hosts() {
  local file=$ELASTIC_HOSTS_DIR/$SLURM_JOB_ID.hosts tmp
  # A dot name without .hosts: discovery ignores it until the rename.
  tmp=$(mktemp "$ELASTIC_HOSTS_DIR/.$SLURM_JOB_ID.XXXXXX") ||
    die "ELASTIC_HOSTS_DIR=$ELASTIC_HOSTS_DIR: cannot write there"
  remove_on_exit "$tmp" "$file"
  printf '%s\n' "$@" >"$tmp"
  chmod a+r "$tmp" # mktemp makes it private; the controller may run as someone else
  mv -f "$tmp" "$file"
  log "registered $* in $file"
}

# lending_jobs: ids of the other jobs registered in the hosts folder (files named otherwise,
# e.g. written by hand, are not jobs and are left alone).
lending_jobs() {
  local file id
  for file in "$ELASTIC_HOSTS_DIR"/*.hosts; do
    id=$(basename "$file" .hosts)
    if [[ -e $file && $id =~ ^[0-9]+$ && $id != "$SLURM_JOB_ID" ]]; then echo "$id"; fi
  done
}

# forget_stale_hosts: remove the files of jobs that no longer run (a holder killed before its
# trap ran, an earlier driver that crashed); Horovod would try to start workers there.
forget_stale_hosts() {
  local id
  for id in $(lending_jobs); do
    if [[ $(squeue --noheader --jobs "$id" --format %T 2>/dev/null) != RUNNING ]]; then
      log "removing the registration of job $id, which is not running"
      rm -f "$ELASTIC_HOSTS_DIR/$id.hosts"
    fi
  done
}

# release_holders: the training is over, so end the holder jobs still registered rather
# than let them idle until their time limit (their trap removes their files).
release_holders() {
  local ids
  mapfile -t ids < <(lending_jobs)
  if ((${#ids[@]})); then
    log "training over: ending holder job(s) ${ids[*]}"
    scancel --signal=TERM --full "${ids[@]}" || log "scancel failed: cancel ${ids[*]} by hand"
  fi
}
