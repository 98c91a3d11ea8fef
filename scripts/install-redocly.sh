#!/usr/bin/env bash
# Installs Redocly CLI (a pinned version, from the npm registry) into
# .tools/redocly, where TestOpenAPIDocumentLints finds it and lints the API's
# OpenAPI document with Redocly's recommended rules. Never fatal: without
# npm, or offline, the test still checks the same rules in Go and says that
# Redocly was skipped. node_modules is never committed (.tools/ is ignored).
set -uo pipefail

VERSION=2.77.0
top=$(cd "$(dirname "$0")/.." && pwd)
dir="$top/.tools/redocly"
bin="$dir/node_modules/.bin/redocly"

if [ -x "$bin" ] && grep -q "\"version\": \"$VERSION\"" "$dir/node_modules/@redocly/cli/package.json" 2>/dev/null; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "install-redocly: npm/node not found; the OpenAPI lint test runs its Go rules only (install Node.js to add Redocly)" >&2
  exit 0
fi
mkdir -p "$dir"
echo "install-redocly: installing @redocly/cli@$VERSION into .tools/redocly"
if ! npm install --prefix "$dir" --no-audit --no-fund --no-save --silent "@redocly/cli@$VERSION" >"$dir/install.log" 2>&1; then
  echo "install-redocly: npm install failed (see .tools/redocly/install.log); the OpenAPI lint test runs its Go rules only" >&2
fi
exit 0
