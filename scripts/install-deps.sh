#!/usr/bin/env bash
# Installs what pgmirror's tests and embedded catalog need on a fresh Debian
# machine: the PostgreSQL server binaries (initdb, pg_ctl, postgres).
set -euo pipefail

have_initdb() {
  [ -n "${PGBIN:-}" ] && [ -x "$PGBIN/initdb" ] && return 0
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && return 0
  command -v initdb >/dev/null 2>&1
}

if ! command -v go >/dev/null 2>&1; then
  echo "install-deps: Go is not on PATH; install Go 1.26 (https://go.dev/dl/) and retry" >&2
  exit 1
fi

if have_initdb; then
  exit 0
fi

echo "install-deps: PostgreSQL server binaries not found; installing them with apt-get"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# postgresql-15 on Debian 12; fall back to the distribution's default version.
$SUDO apt-get install -y -q --no-install-recommends postgresql-15 postgresql-client-15 \
  || $SUDO apt-get install -y -q --no-install-recommends postgresql postgresql-client
# The package starts a system cluster on 5432; the tests start their own.
have_initdb || { echo "install-deps: initdb still missing after install" >&2; exit 1; }
