#!/usr/bin/env bash
# Session 29, run 1: the int8 matmul at one row. Variants: main; one (branch s29-int8-one-row: an
# instance for m = 1 that adds, scales and stores only the C fragments' real rows, 6 fewer
# instructions a 128-input stage); bias (s29-int8-bias: one, and each lane sums its rows' biases
# itself after the staging barrier instead of one thread writing them before a second barrier).
# GPU tests of bias (and the int8 test of one); the int8 linears at 1 and 2 rows, one round each;
# the 8B decode at batch 1 and 4 (int8 auto) in four alternating rounds, the 70B at batch 1 in two
# (main and bias).
# Bundle: exl3-bench-{main,one,bias}, the *_gpu_test binaries built from bias and
# exl3_gemv_int8_gpu_test-one.
set -u
. bench/device_run.sh
device_begin
device_gpu_tests exl3_gemv_int8_gpu_test-one exl3_gemv_int8_gpu_test exl3_linear_gpu_test backend_ops_gpu_test \
  step_graph_gpu_test llama_model_gpu_test
for r in 1; do for v in main one bias; do
  timeout 90 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --rows 1,2 --no-check --linear-bits 0 --int8 \
    --shapes 8192x28672,28672x8192,4096x28672,14336x4096,4096x4096,4096x6144 --markdown $R/gemv-$v-$r.md > $R/gemv-$v-$r.log 2>&1
  echo "gemv $v r$r rc $?: $(grep -E '^\| linear-' $R/gemv-$v-$r.md | awk -F'|' '{printf "%s %s/%s %s  ", substr($2,9,4), $3, $6, $7}')" >> $S
done; done
device_model_rounds 4 "main one bias" 8b "1,4" 32
device_model_rounds 2 "main bias" 70b "1" 16
device_end
