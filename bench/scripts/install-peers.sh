#!/usr/bin/env bash
# Installs what `herdsman-bench compare` measures herdsman against and with, from Debian's
# packages: haproxy, nginx-light and wrk, and fonts-dejavu-core for its plots; varnish for
# `herdsman-bench cache`; caddy and redis-server for `herdsman-bench rules`; and what the tests
# check herdsman with: promtool (Debian's prometheus) for the /metrics output, chromium (run headless) for the stats page, strace for the churn
# benchmark's system calls, valgrind for the instruction budget's counts, curl and openssl as TLS
# clients, h2load (Debian's nghttp2-client) for the tls benchmark's handshakes, and pebble (Let's
# Encrypt's test CA, with pebble-challtestsrv's DNS) for tests/acme.rs; and Python's grpcio (from
# PyPI) for tests/grpc.rs. Installs only what is missing (nothing, when all are there); uses sudo
# when not run as root. CI runs it before `cargo test --workspace`, whose short comparison
# (bench/tests/compare_short.rs), tests/tls_servers.rs (nginx as a TLS server behind herdsman),
# short churn, tls and cache runs, the instruction budget (bench/tests/budget.rs),
# tests/metrics.rs, tests/stats_page.rs, tests/tls_clients.rs and tests/acme.rs need them all.
set -euo pipefail

# haproxy and nginx live in /usr/sbin, which a non-root PATH often lacks.
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }

missing=()
have haproxy || missing+=(haproxy)
have nginx || missing+=(nginx-light)
# Varnish, the third cache the cache benchmark measures herdsman's against
# (bench/tests/cache_short.rs).
have varnishd || missing+=(varnish)
have wrk || missing+=(wrk)
# promtool (Prometheus's own checker of the text format) for tests/metrics.rs.
have promtool || missing+=(prometheus)
# A real browser for tests/stats_page.rs, which fails without it.
have chromium || missing+=(chromium)
# strace counts system calls per connection for the churn benchmark (bench/tests/churn_short.rs).
have strace || missing+=(strace)
# valgrind (with callgrind_control) counts instructions per request for the instruction budget
# (bench/tests/budget.rs, bench/budget.toml).
have valgrind && have callgrind_control || missing+=(valgrind)
# Real TLS clients for tests/tls_clients.rs: curl, and openssl's s_client.
have curl || missing+=(curl)
have openssl || missing+=(openssl)
# h2load drives full TLS handshakes for the tls benchmark (bench/tests/tls_short.rs), which also
# uses openssl's s_time, and is the legitimate HTTP/2 clients of h2-attacks
# (bench/tests/h2_attacks_short.rs); nghttp, from the same package, is an HTTP/2 client of
# tests/http2.rs.
have h2load && have nghttp || missing+=(nghttp2-client)
# An ACME CA to obtain certificates from, started by tests/acme.rs, which fails without it.
have pebble && have pebble-challtestsrv || missing+=(pebble)
# redis-server for tests/rate_limit.rs (two herdsman processes sharing a limit through it, and
# failing open when it stops).
have redis-server || missing+=(redis-server)
# Caddy (Debian's 2.6), the third peer of the rules benchmark's header rules and compression
# (bench/tests/rules_short.rs).
have caddy || missing+=(caddy)
# Knot DNS, the real DNS server tests/discovery_dns.rs starts and changes records on (knotd,
# knotc).
have knotd && have knotc || missing+=(knot)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
# The system's trusted CAs, which a [pool.tls] without `ca` verifies servers against
# (tests/tls_servers.rs checks that they do not trust the test CA).
[ -f /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)

# A real gRPC client and server for tests/grpc.rs: Python's grpcio, from PyPI (Debian's
# python3-grpcio where pip cannot install for the system's Python).
if ! python3 -c 'import grpc' 2>/dev/null; then
  python3 -m pip install --quiet grpcio 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages grpcio 2>/dev/null \
    || missing+=(python3-grpcio)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "haproxy, nginx, varnish, caddy, wrk, promtool, chromium, strace, valgrind, curl, openssl, h2load, pebble, redis-server, knot, grpcio, the system CAs and the plot font are installed"
  exit 0
fi

as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo)
echo "installing ${missing[*]}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"
