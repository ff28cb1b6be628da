#!/usr/bin/env bash
# What an idle connection costs each proxy in resident memory: herdsman (h2c and HTTP/1.1 on one
# listener), nginx and HAProxy (h2c), each started afresh in front of one nginx backend, one
# worker each. For each: VmRSS of the serving process, then N idle clients opened one after
# another (idle_h2.py / idle_h1.py: one request each, read whole), then VmRSS again 2 s after the
# last: (after - before) / N. Usage: bench/scripts/idle-memory/run.sh [N] (default 8000; under
# the 20,000-descriptor limit per process; HAProxy's maxconn 9,900 asks for twice that many).
# Needs herdsman's release binary, nginx and haproxy. ROUNDS (default 1) repeats the whole table.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
n="${1:-8000}"
herdsman="$here/../../../target/release/herdsman"
work=/tmp/idle-memory
mkdir -p "$work/www" && echo hello > "$work/www/index.html"
rss() { awk '/VmRSS/{print $2}' "/proc/$1/status"; }
stop_all() {
    pkill -f "herdsman run -c $here/herdsman.toml" || true
    pkill -f "haproxy -f $here/haproxy.cfg" || true
    [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
    [ -f "$work/backend.pid" ] && kill "$(cat "$work/backend.pid")" 2>/dev/null || true
    sleep 0.5
}
trap stop_all EXIT
measure() { # name port pid script
    local before after
    before=$(rss "$3")
    python3 "$here/$4" 127.0.0.1 "$2" "$n" 10 > "$work/out.$2" &
    local client=$!
    for _ in $(seq 1 600); do grep -q ready "$work/out.$2" 2>/dev/null && break; sleep 0.5; done
    sleep 2
    after=$(rss "$3")
    printf '| %s | %d | %d KiB | %d KiB | %d bytes |\n' "$1" "$n" "$before" "$after" $(( (after - before) * 1024 / n ))
    wait "$client"
}
stop_all
nginx -c "$here/backend.conf" &
sleep 0.5
echo "| proxy | idle connections | RSS before | RSS after | per idle connection |"
echo "|---|---:|---:|---:|---:|"
for _round in $(seq 1 "${ROUNDS:-1}"); do
for case in "herdsman h2c:18083:idle_h2.py" "herdsman HTTP/1.1:18083:idle_h1.py" "nginx h2c:18081:idle_h2.py" "HAProxy h2c:18082:idle_h2.py"; do
    IFS=: read -r name port script <<< "$case"
    case "$name" in
        herdsman*) ("$herdsman" run -c "$here/herdsman.toml" > "$work/herdsman.log" 2>&1 &) ; sleep 1; pid=$(pgrep -f "herdsman run -c $here/herdsman.toml") ;;
        nginx*) nginx -c "$here/nginx.conf" 2>/dev/null & sleep 1; pid=$(pgrep -P "$(cat "$work/nginx.pid")" | head -1) ;;
        HAProxy*) haproxy -f "$here/haproxy.cfg" > "$work/haproxy.log" 2>&1 & sleep 1; pid=$(pgrep -f "haproxy -f $here/haproxy.cfg") ;;
    esac
    curl -s --http2-prior-knowledge "127.0.0.1:$port/" > /dev/null
    measure "$name" "$port" "$pid" "$script"
    pkill -f "herdsman run -c $here/herdsman.toml" || true
    pkill -f "haproxy -f $here/haproxy.cfg" || true
    [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
    sleep 1
done
done
