#!/usr/bin/env bash
# Installs axe-core, the accessibility checker that the web console's
# browser tests run on every console page (cmd/pgmirror/console_a11y_e2e_test.go).
#
# It comes from the npm package axe-core at the version pinned below: the
# tarball is fetched with `npm pack`, checked against the sha512 integrity
# pinned beside it (the `dist.integrity` of the registry's metadata for that
# version), and its axe.min.js (with its licence) is unpacked into
#
#   $PGMIRROR_AXE_CACHE/<version>/axe.min.js
#
# PGMIRROR_AXE_CACHE defaults to /var/cache/pgmirror/axe-core when run as
# root and to ${XDG_CACHE_HOME:-~/.cache}/pgmirror/axe-core otherwise; the
# tests look in the same place (or at PGMIRROR_AXE_JS, a path to an
# axe.min.js). A version already unpacked there is not fetched again.
#
# Set PGMIRROR_SKIP_AXE=1 to skip this step (the accessibility test then
# skips, or fails when PGMIRROR_TEST_REQUIRE_MAJORS=1 or
# PGMIRROR_TEST_REQUIRE_AXE=1, as make test sets the former).
#
# To move to a newer release: `npm view axe-core version` gives the latest;
# `npm view axe-core@<version> dist.integrity` gives the checksum to pin.
set -euo pipefail

PACKAGE="axe-core"
VERSION="4.14.1"
INTEGRITY="sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ=="

if [ "${PGMIRROR_SKIP_AXE:-}" = "1" ]; then
  echo "install-axe-core: skipped (PGMIRROR_SKIP_AXE=1)"
  exit 0
fi

if [ -n "${PGMIRROR_AXE_CACHE:-}" ]; then
  cache="$PGMIRROR_AXE_CACHE"
elif [ "$(id -u)" -eq 0 ]; then
  cache=/var/cache/pgmirror/axe-core
else
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/pgmirror/axe-core"
fi
dest="$cache/$VERSION"
if [ -f "$dest/.installed" ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install-axe-core: npm not found (it fetches axe-core for the console's accessibility test); installing it with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends npm
fi
for tool in node tar flock; do
  command -v "$tool" >/dev/null 2>&1 || { echo "install-axe-core: $tool is missing" >&2; exit 1; }
done

umask 022
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
[ -f "$dest/.installed" ] && exit 0 # another run installed it meanwhile

echo "install-axe-core: fetching $PACKAGE@$VERSION into $dest"
work=$(mktemp -d "$cache/.tmp-$VERSION.XXXXXX")
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE@$VERSION" >/dev/null)
tarball=$(ls "$work"/*.tgz)
got="sha512-$(node -e 'const c=require("crypto"),f=require("fs");process.stdout.write(c.createHash("sha512").update(f.readFileSync(process.argv[1])).digest("base64"))' "$tarball")"
if [ "$got" != "$INTEGRITY" ]; then
  echo "install-axe-core: checksum mismatch for $PACKAGE@$VERSION: want $INTEGRITY, got $got; nothing installed" >&2
  exit 1
fi
mkdir "$work/x"
tar -xzf "$tarball" -C "$work/x" --no-same-owner --no-same-permissions package/axe.min.js package/LICENSE package/package.json
[ -s "$work/x/package/axe.min.js" ] || { echo "install-axe-core: $PACKAGE@$VERSION has no axe.min.js" >&2; exit 1; }
got_version=$(node -e 'process.stdout.write(require(process.argv[1]).version)' "$work/x/package/package.json")
[ "$got_version" = "$VERSION" ] || { echo "install-axe-core: the package says version $got_version, not $VERSION" >&2; exit 1; }
mkdir "$work/out"
mv "$work/x/package/axe.min.js" "$work/x/package/LICENSE" "$work/out/"
echo "$PACKAGE@$VERSION $INTEGRITY" >"$work/out/.installed"
chmod -R a+rX,go-w "$work/out"
rm -rf "$dest"
mv "$work/out" "$dest"
echo "install-axe-core: $PACKAGE $VERSION in $dest"
