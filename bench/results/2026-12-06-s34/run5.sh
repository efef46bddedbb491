#!/usr/bin/env bash
# Session 34, run 5 (the same warm H100): the decode attention alone (exl3-bench kernels, graph
# timing) at contexts of 160 and 2048 keys, batch 1 / 16 / 32, three alternating runs per build; then
# three rounds of the 8B at batch 1 with 64 steps.
set -u
. bench/device_run.sh
device_begin
for c in 160 2048; do
  for v in units main units main units main; do
    timeout 100 "$B/exl3-bench-$v" kernels --model /tmp/m8b --backend cuda --rows 1,16,32 --context "$c" \
      --markdown "$R/k-$v-$c.md" > "$R/k-$v-$c.log" 2>&1
    rc=$?
    us=$(grep -E '^\| attention' "$R/k-$v-$c.md" | awk -F'|' '{printf "%s:%s ", $3, $6}')
    echo "kernels $v context $c rc $rc: $us" >> "$S"
  done
done
device_model_rounds 3 "units main" 8b "1" 64
device_end
