#!/usr/bin/env bash
# Wall time of every subcommand on every preset (issue 39's goal: each under 0.5 s in a Release
# build), slowest first. Run from the repository root after building the tool:
#   bash tests/bench/cli_time.sh [path/to/vramfit]     (default: build/examples/cli/vramfit)
set -euo pipefail
cd "$(dirname "$0")/../.."
tool=${1:-build/examples/cli/vramfit}
commands=(
  "train --gpu h100" "train --gpu h100 -f json" "train --gpu h100 --qlora" "train --gpu h100 --timeline"
  "train --gpu h100 --fsdp full --dp 8" "min-gpus --gpu h100" "min-gpus --gpu h100 --fsdp full"
  "plan --gpus 64" "plan --fsdp full" "infer --gpu h100" "load --gpu h100"
)
results=$(mktemp)
for preset in $("$tool" models -f json | sed -n 's/.*"key": "\([^"]*\)".*/\1/p'); do
  for command in "${commands[@]}"; do
    read -r subcommand rest <<<"$command"
    start=$(date +%s%N)
    status=0
    # shellcheck disable=SC2086 # the options are words
    "$tool" "$subcommand" -m "$preset" $rest >/dev/null 2>&1 || status=$?
    end=$(date +%s%N)
    echo "$(((end - start) / 1000000)) ms  (exit $status)  vramfit $subcommand -m $preset $rest" >>"$results"
  done
done
sort -rn "$results" | head -15
echo "$(wc -l <"$results") commands, $(awk '$1 >= 500' "$results" | wc -l) of them 0.5 s or more"
rm -f "$results"
