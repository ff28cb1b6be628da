#!/usr/bin/env bash
# CPU time per request of herdsman builds, split into user and kernel, in rounds that alternate
# the builds so that the machine's drift falls on all of them. Seconds, not instructions: this
# is what a clock-read or syscall change buys in time (instructions-per-request.sh counts the
# instructions). Usage:
#   bench/scripts/cpu-per-request.sh LABEL=PATH [LABEL=PATH ...]
# ROUNDS (default 5), SECONDS_PER_RUN (default 8) and CONNECTIONS (default 50) set the load:
# wrk -t1 against one herdsman at a time; HEADER adds a header to every request (HEADER="Connection:
# close" for a new connection each time). WORKERS (default 1) sets the config key. REQUEST_PATH
# (default /) is what is asked for: /big is the backend's 1 MiB answer, so that µs per request are
# µs per MiB. TLS=1 puts the listener on HTTPS (proxy-setup.sh). Prints one line per run and then
# each build's median. Needs wrk and curl; starts its own backend.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/scripts/proxy-setup.sh
rounds=${ROUNDS:-5}
seconds=${SECONDS_PER_RUN:-8}
connections=${CONNECTIONS:-50}
request_path=${REQUEST_PATH:-/}
headers=()
[ -n "${HEADER:-}" ] && headers=(-H "$HEADER")
ticks=$(getconf CLK_TCK)

# cpu_ticks PID: user and system clock ticks the process has used so far.
cpu_ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }

printf '| round | build | requests/s | user µs/request | kernel µs/request | total µs/request |\n'
printf '|---:|---|---:|---:|---:|---:|\n'
for round in $(seq "$rounds"); do
  for spec in "$@"; do
    label=${spec%%=*}; bin=${spec#*=}; port=$(free_port)
    write_config "$work/$label.toml" "$port"
    "$bin" run -c "$work/$label.toml" 2>"$work/$label.log" &
    pid=$!
    for _ in $(seq 100); do curl -sk -o /dev/null "$scheme://127.0.0.1:$port/" && break; sleep 0.1; done
    wrk -t1 -c10 -d1s "${headers[@]}" "$scheme://127.0.0.1:$port$request_path" >/dev/null   # warm-up, not counted
    read -r user0 system0 < <(cpu_ticks "$pid")
    out=$(wrk -t1 -c"$connections" -d"${seconds}s" "${headers[@]}" "$scheme://127.0.0.1:$port$request_path")
    read -r user1 system1 < <(cpu_ticks "$pid")
    kill -INT "$pid"; wait "$pid" || true
    requests=$(echo "$out" | awk '/requests in/ {print $1}')
    awk -v r="$round" -v l="$label" -v n="$requests" -v s="$seconds" -v t="$ticks" \
      -v u=$((user1 - user0)) -v k=$((system1 - system0)) 'BEGIN {
        us = 1e6 / t / n
        printf "| %d | %s | %.0f | %.2f | %.2f | %.2f |\n", r, l, n / s, u * us, k * us, (u + k) * us
      }' | tee -a "$work/rows"
  done
done
printf '\nMedians over %d rounds:\n\n| build | requests/s | user µs/request | kernel µs/request | total µs/request |\n|---|---:|---:|---:|---:|\n' "$rounds"
for spec in "$@"; do
  label=${spec%%=*}
  for column in 4 5 6 7; do
    awk -F'|' -v l=" $label " -v c="$column" '$3 == l {gsub(/ /, "", $c); print $c}' "$work/rows" |
      sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
  done | paste -sd' ' | awk -v l="$label" '{printf "| %s | %.0f | %.2f | %.2f | %.2f |\n", l, $1, $2, $3, $4}'
done
