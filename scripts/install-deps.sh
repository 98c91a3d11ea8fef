#!/usr/bin/env bash
# Installs what pgmirror's embedded catalog and tests need on a fresh Debian
# machine: the PostgreSQL server binaries (initdb, pg_ctl, postgres) and, with
# --browser (make test), Chromium, in which the web console's browser tests
# run headless. Both come from the distribution's packages in one apt-get step.
set -euo pipefail

want_browser=false
for arg in "$@"; do
  case "$arg" in
    --browser) want_browser=true ;;
    *) echo "install-deps: unknown argument $arg (use --browser to install Chromium too)" >&2; exit 2 ;;
  esac
done

have_initdb() {
  [ -n "${PGBIN:-}" ] && [ -x "$PGBIN/initdb" ] && return 0
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && return 0
  command -v initdb >/dev/null 2>&1
}

have_chromium() {
  [ -x /usr/bin/chromium ] || command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1
}

if ! command -v go >/dev/null 2>&1; then
  echo "install-deps: Go is not on PATH; install Go 1.26 (https://go.dev/dl/) and retry" >&2
  exit 1
fi

need_postgres=false
need_chromium=false
have_initdb || need_postgres=true
if $want_browser && ! have_chromium; then
  need_chromium=true
fi
if ! $need_postgres && ! $need_chromium; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
if $need_postgres; then
  echo "install-deps: PostgreSQL server binaries not found; installing them with apt-get"
  # postgresql-15 on Debian 12; fall back to the distribution's default version.
  $SUDO apt-get install -y -q --no-install-recommends postgresql-15 postgresql-client-15 \
    || $SUDO apt-get install -y -q --no-install-recommends postgresql postgresql-client
  # The package starts a system cluster on 5432; the tests start their own.
  have_initdb || { echo "install-deps: initdb still missing after install" >&2; exit 1; }
fi
if $need_chromium; then
  echo "install-deps: Chromium not found (the web console's browser tests need it); installing it with apt-get"
  $SUDO apt-get install -y -q --no-install-recommends chromium
  have_chromium || { echo "install-deps: chromium still missing after install" >&2; exit 1; }
fi
