#!/usr/bin/env bash
# fetch.sh installs the official OpenAI Node client into server/testdata/npm/
# (git-ignored) for the client compatibility test (cmd/gearbox
# TestOpenAINodeClient). Needs node >= 18 and the npm registry.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="$here/npm"
mkdir -p "$dest"
if [ ! -f "$dest/package.json" ]; then
	echo '{"name":"gearbox-openai-client-test","private":true,"type":"module"}' >"$dest/package.json"
fi
npm install --prefix "$dest" --no-audit --no-fund --loglevel=error "openai@7"
