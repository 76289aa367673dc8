#!/usr/bin/env bash
# Elastic Horovod host discovery: print one `host:slots` line per host. Horovod calls this
# every second or so.
#   discover_hosts.sh               the holders' files in $ELASTIC_HOSTS_DIR (one file per
#                                   worker-holder job, lines `host:slots`, written atomically
#                                   by the holder); slots of a host listed twice are summed
#   discover_hosts.sh COMMAND...    another discovery command's output, checked the same way
#                                   (horovodrun --host-discovery-script "discover_hosts.sh
#                                   my_discovery.sh"): Horovod itself would take a stray
#                                   line for a host, or drop a whole answer for one bad line
# Lines that are not `host:slots`, and hosts that do not resolve, are skipped with a warning
# on stderr, so one bad line never hides the good ones; an answer with no good line lists no
# host (the run checkpoints, records the event, and ends if none comes back within
# horovodrun's --elastic-timeout). A COMMAND that fails, or hangs for longer than
# $DISCOVERY_TIMEOUT_S (default 20 s; Horovod would wait on it for ever and miss every later
# change), makes this fail: Horovod warns, keeps the hosts it has and asks again.
set -euo pipefail

declare -A slots=()
# add SOURCE LINE: count LINE's slots, or say why it is skipped
add() {
  local source=$1 line=$2 host n
  [ -z "${line// /}" ] && return 0
  if [[ ! $line =~ ^([A-Za-z0-9._-]+):([0-9]+)$ ]]; then
    echo "discover_hosts: ignoring '$line' in $source: expected host:slots" >&2
    return 0
  fi
  host=${BASH_REMATCH[1]} n=${BASH_REMATCH[2]}
  if ! getent hosts "$host" >/dev/null; then
    echo "discover_hosts: ignoring unknown host '$host' in $source" >&2
    return 0
  fi
  slots[$host]=$((${slots[$host]:-0} + 10#$n))
}

# no_hosts_files DIR: say at once why discovery finds no host (Horovod itself waits its whole
# --elastic-timeout without a word), then again only when the folder changes or a minute has
# passed: Horovod asks every second, and the same line every second would bury the log.
no_hosts_files() {
  local dir=$1 others message seen now last
  others=$(cd "$dir" && find . -mindepth 1 -maxdepth 1 ! -name '.*' -printf '%f\n' | sort | head -5 | paste -sd, -)
  if [ -n "$others" ]; then
    message="discover_hosts: no *.hosts file in $dir (it holds: ${others//,/, }): only files named *.hosts are read"
  else
    message="discover_hosts: no *.hosts file in $dir yet: no host to run on until a holder job or 'bigearthnet-elastic follow --local' writes one"
  fi
  seen="${TMPDIR:-/tmp}/discover_hosts-$(id -u)-$(printf '%s' "$dir" | cksum | cut -d' ' -f1)"
  now=$(date +%s)
  last=$(cat "$seen" 2>/dev/null || true)
  if [ "${last#* }" != "$message" ] || ((now - ${last%% *} >= 60)); then
    echo "$message" >&2
    printf '%s %s' "$now" "$message" >"$seen" 2>/dev/null || true
  fi
}

if (($#)); then
  limit=${DISCOVERY_TIMEOUT_S:-20}
  answer=$(timeout "$limit" "$@") || {
    rc=$?
    if [ "$rc" = 124 ]; then
      echo "discover_hosts: '$*' gave no answer within ${limit} s (DISCOVERY_TIMEOUT_S)" >&2
    else
      echo "discover_hosts: '$*' failed (exit $rc)" >&2
    fi
    exit 1
  }
  while IFS= read -r line; do add "the output of $1" "$line"; done <<<"$answer"
else
  dir=${ELASTIC_HOSTS_DIR:?set ELASTIC_HOSTS_DIR to the folder the holder jobs write to}
  [ -d "$dir" ] || { echo "discover_hosts: $dir does not exist" >&2; exit 1; }
  shopt -s nullglob
  files=("$dir"/*.hosts)
  for file in "${files[@]}"; do
    name=$(basename "$file")
    while IFS= read -r line || [ -n "$line" ]; do add "$name" "$line"; done <"$file"
  done
  ((${#files[@]})) || no_hosts_files "$dir"
fi
for host in "${!slots[@]}"; do
  [ "${slots[$host]}" -gt 0 ] && echo "$host:${slots[$host]}"
done | sort
