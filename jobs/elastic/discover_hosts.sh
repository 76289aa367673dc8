#!/usr/bin/env bash
# Elastic Horovod host discovery: print one `host:slots` line per host, from the files in
# $ELASTIC_HOSTS_DIR (one file per worker-holder job, lines `host:slots`, written atomically
# by the holder). Slots of a host listed by several holders are summed. Lines that are not
# `host:slots`, and hosts that do not resolve, are skipped with a warning on stderr, so one
# bad file never hides the good ones. Horovod calls this every few seconds.
set -euo pipefail
dir=${ELASTIC_HOSTS_DIR:?set ELASTIC_HOSTS_DIR to the folder the holder jobs write to}
[ -d "$dir" ] || { echo "discover_hosts: $dir does not exist" >&2; exit 1; }

shopt -s nullglob
declare -A slots=()
for file in "$dir"/*.hosts; do
  name=$(basename "$file")
  while IFS= read -r line || [ -n "$line" ]; do
    [ -z "${line// /}" ] && continue
    if [[ ! $line =~ ^([A-Za-z0-9._-]+):([0-9]+)$ ]]; then
      echo "discover_hosts: ignoring '$line' in $name: expected host:slots" >&2
      continue
    fi
    host=${BASH_REMATCH[1]} n=${BASH_REMATCH[2]}
    if ! getent hosts "$host" >/dev/null; then
      echo "discover_hosts: ignoring unknown host '$host' in $name" >&2
      continue
    fi
    slots[$host]=$(( ${slots[$host]:-0} + n ))
  done < "$file"
done
for host in "${!slots[@]}"; do
  [ "${slots[$host]}" -gt 0 ] && echo "$host:${slots[$host]}"
done | sort
