#!/usr/bin/env bash
# Compile-time benchmarks (tests/bench): the umbrella header with one static_assert'ed plan
# against a TU with only the Boost.Units headers vramfit uses, and a layout search at compile
# time. Seconds are the best of 3 syntax-only compiles; instructions (valgrind's callgrind, when
# installed) do not depend on what else the machine runs. Run from the repository root:
#   bash tests/bench/compile_time.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds() {  # best of 3 wall-clock seconds for one syntax-only compile
  local best=999
  for _ in 1 2 3; do
    local start end
    start=$(date +%s.%N)
    "$@" >/dev/null 2>&1
    end=$(date +%s.%N)
    best=$(echo "$end - $start" | bc -l | awk -v b="$best" '{ print ($1 < b) ? $1 : b }')
  done
  printf '%.2f' "$best"
}
instructions() {  # millions of instructions the compiler executes, its child processes included
  command -v valgrind >/dev/null || { echo "-"; return; }
  local dir
  dir=$(mktemp -d)
  valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$dir/out.%p" "$@" \
    >/dev/null 2>&1 || true
  cat "$dir"/out.* | awk '/^summary:/ { n += $2 } END { printf "%d", n / 1e6 }'
  rm -rf "$dir"
}
echo "| compiler | Boost.Units only (s, Minstr) | umbrella + one plan (s, Minstr) | ratio (s, instr) | layout search (s) |"
echo "|---|---:|---:|---:|---:|"
for cxx in g++ clang++; do
  flags=(-std=c++20 -fsyntax-only -Iinclude)
  base=$(seconds "$cxx" "${flags[@]}" tests/bench/boost_units_only.cpp)
  plan=$(seconds "$cxx" "${flags[@]}" tests/bench/plan.cpp)
  search=$(seconds "$cxx" "${flags[@]}" tests/bench/search.cpp)
  base_i=$(instructions "$cxx" "${flags[@]}" tests/bench/boost_units_only.cpp)
  plan_i=$(instructions "$cxx" "${flags[@]}" tests/bench/plan.cpp)
  ratio=$(echo "$plan / $base" | bc -l)
  ratio_i=$([ "$base_i" = - ] && echo - || echo "$plan_i / $base_i" | bc -l | xargs printf '%.2f')
  printf '| %s | %s, %s | %s, %s | %.2f, %s | %s |\n' "$cxx" "$base" "$base_i" "$plan" "$plan_i" \
    "$ratio" "$ratio_i" "$search"
done
# The smallest -fconstexpr-steps with which clang evaluates the search (default 1,048,576).
lo=1; hi=1048576
while [ $((hi - lo)) -gt 1024 ]; do
  mid=$(((lo + hi) / 2))
  if clang++ -std=c++20 -fsyntax-only -Iinclude -fconstexpr-steps=$mid tests/bench/search.cpp >/dev/null 2>&1; then
    hi=$mid
  else
    lo=$mid
  fi
done
echo
echo "clang constexpr steps for the layout search: about $hi of the default 1,048,576"
