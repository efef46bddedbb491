#!/usr/bin/env bash
# Session 29, run 3: the GPU tests of onebias (branch s29-int8-one-bias: run 1's one, and at one row
# only the lanes that store the row sum its bias themselves, no second barrier; more rows keep
# main's code, SASS-identical to main's) and two alternating rounds of the 8B at batch 1 (int8 auto)
# against main. Bundle: exl3-bench-{main,onebias,bias} and the *_gpu_test binaries built from
# onebias.
set -u
. bench/device_run.sh
device_begin
device_gpu_tests exl3_gemv_int8_gpu_test exl3_linear_gpu_test backend_ops_gpu_test step_graph_gpu_test \
  llama_model_gpu_test
device_model_rounds 2 "main onebias" 8b "1" 32
device_end
