#!/usr/bin/env bash
# Instructions per request of herdsman binaries, counted by callgrind only while wrk drives them:
# repeatable whatever else the machine is doing (valgrind runs the threads one at a time, so this
# counts work, not contention). Usage:
#   bench/scripts/instructions-per-request.sh LABEL=PATH [LABEL=PATH ...]
# WORKERS (default 1) and INTAKE (default: herdsman's own) set those config keys; SERVERS=N and
# BALANCE make the pool N servers on loopback addresses of their own (see proxy-setup.sh), and
# WARM_SECONDS (default 3) the uncounted warm-up, which must reach every server once (25 s for
# 10,000 under valgrind: the counted run then measures reuse, not connecting); TLS=1 measures
# keep-alive requests over HTTPS (wrk's 50 connections made during the warm-up). KEEP=DIR keeps
# each build's callgrind output as DIR/LABEL.cg, for `callgrind_annotate` (by function, or with
# --tree=caller for who calls what, e.g. how many clock reads a request makes).
# Needs valgrind, wrk and curl; starts its own herdsman-bench backend on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/scripts/proxy-setup.sh
printf '| build | requests counted | instructions | instructions per request |\n|---|---:|---:|---:|\n'
for spec in "$@"; do
  label=${spec%%=*}; bin=${spec#*=}; port=$(free_port)
  write_config "$work/$label.toml" "$port"
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/$label.cg" \
    "$bin" run -c "$work/$label.toml" 2>"$work/$label.log" &
  pid=$!
  for _ in $(seq 150); do curl -sk -o /dev/null "$scheme://127.0.0.1:$port/" && break; sleep 0.2; done
  wrk -t1 -c50 --timeout 30s -d"${WARM_SECONDS:-3}s" "$scheme://127.0.0.1:$port/" >/dev/null   # warm-up, not counted
  callgrind_control -i on "$pid" >/dev/null 2>&1
  out=$(wrk -t1 -c50 --timeout 30s -d10s "$scheme://127.0.0.1:$port/")
  callgrind_control -i off "$pid" >/dev/null 2>&1
  kill -INT "$pid"; wait "$pid" || true
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work/$label.cg" "$KEEP/$label.cg"; fi
  requests=$(echo "$out" | awk '/requests in/ {print $1}')
  instructions=$(awk '/^totals:/ {print $2}' "$work/$label.cg")
  printf '| %s | %d | %d | %d |\n' "$label" "$requests" "$instructions" $((instructions / requests))
done
