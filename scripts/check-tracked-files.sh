#!/usr/bin/env bash
# Fails when the git repository holds something that is not source: a tracked
# file that is an executable binary (ELF, Mach-O, Windows PE: a build output
# committed by mistake) or that is larger than 1 MB. Each offending file is
# named with the reason and what to do.
#
# Allowed: a vendored web asset (a minified script, a stylesheet, a font) in
# a folder named vendor-web/ or vendor/ that holds its licence (a file named
# LICENSE*, LICENCE* or COPYING*) may be up to 5 MB. Executables are never
# allowed.
#
# Run from anywhere inside the repository; `make test` runs it first. It uses
# `file` when installed and otherwise (or with CHECK_TRACKED_FILES_NO_FILE=1)
# recognises executables by their first bytes.
set -euo pipefail

MAX_BYTES=$((1024 * 1024))
MAX_VENDORED_BYTES=$((5 * 1024 * 1024))

if ! command -v git >/dev/null 2>&1 || ! top=$(git rev-parse --show-toplevel 2>/dev/null); then
  echo "check-tracked-files: not inside a git checkout; nothing to check"
  exit 0
fi
cd "$top"

use_file=0
if [ -z "${CHECK_TRACKED_FILES_NO_FILE:-}" ] && command -v file >/dev/null 2>&1; then
  use_file=1
fi

# executable_kind prints what kind of executable binary $1 is, or nothing.
executable_kind() {
  local path=$1 magic mime
  # The first four bytes, as hex; od is in every coreutils.
  magic=$(head -c4 -- "$path" | od -An -tx1 | tr -d ' \n')
  case "$magic" in
    7f454c46) echo "an ELF executable or library"; return ;;
    feedface | feedfacf | cefaedfe | cffaedfe) echo "a Mach-O executable"; return ;;
  esac
  if [ "$use_file" = 1 ]; then
    mime=$(file --brief --mime-type -- "$path" 2>/dev/null || true)
    case "$mime" in
      application/x-executable | application/x-pie-executable | application/x-sharedlib | \
        application/x-mach-binary | application/x-dosexec | application/vnd.microsoft.portable-executable | \
        application/x-object | application/x-archive)
        echo "an executable binary ($mime)"
        return
        ;;
    esac
  fi
}

# vendored_asset succeeds when $1 lies under a vendor-web/ or vendor/ folder
# that holds a licence file.
vendored_asset() {
  local dir
  dir=$(dirname -- "$1")
  while [ "$dir" != "." ] && [ "$dir" != "/" ]; do
    case "$(basename -- "$dir")" in
      vendor-web | vendor)
        compgen -G "$dir/LICENSE*" >/dev/null || compgen -G "$dir/LICENCE*" >/dev/null ||
          compgen -G "$dir/COPYING*" >/dev/null
        return
        ;;
    esac
    dir=$(dirname -- "$dir")
  done
  return 1
}

failures=0
while IFS= read -r -d '' path; do
  # Tracked but deleted in the working tree, or a symbolic link: nothing to read.
  [ -f "$path" ] && [ ! -L "$path" ] || continue
  kind=$(executable_kind "$path")
  if [ -n "$kind" ]; then
    echo "check-tracked-files: $path is $kind: build outputs do not belong in the repository;" \
      "remove it with 'git rm --cached $path' and add it to .gitignore" >&2
    failures=$((failures + 1))
    continue
  fi
  size=$(wc -c <"$path" | tr -d ' ')
  limit=$MAX_BYTES
  what="1 MB"
  if vendored_asset "$path"; then
    limit=$MAX_VENDORED_BYTES
    what="5 MB (the limit of a vendored web asset)"
  fi
  if [ "$size" -gt "$limit" ]; then
    echo "check-tracked-files: $path is $size bytes, larger than $what: keep large files out of the repository" \
      "(generate them, or fetch them at build time); a vendored web asset belongs in a vendor-web/ folder with its LICENSE file" >&2
    failures=$((failures + 1))
  fi
done < <(git ls-files -z)

if [ "$failures" -gt 0 ]; then
  echo "check-tracked-files: $failures tracked file(s) are not source (see above)" >&2
  exit 1
fi
echo "check-tracked-files: every tracked file is source"
