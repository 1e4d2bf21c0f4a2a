#!/usr/bin/env bash
# README command 1: install what is missing, build, run the main job
# (`ffn bench`: the paper's sublayer, 512 -> 2048, ReLU, post-LN, on 8 x 512 tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build/bin/ffn bench "$@"
