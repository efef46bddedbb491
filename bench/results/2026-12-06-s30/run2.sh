#!/usr/bin/env bash
# Session 30, run 2: branch s30-own-output (own: the one-row int8 linears finish their own outputs,
# no output launch) against main (d7d03be): the GPU tests of own's build, then alternating rounds
# of the 8B at batch 1 and 4 (three) and the 70B at batch 1 (two), int8 auto.
set -u
. bench/device_run.sh
device_begin
device_gpu_tests exl3_gemv_int8_gpu_test exl3_linear_gpu_test backend_ops_gpu_test step_graph_gpu_test llama_model_gpu_test
device_model_rounds 3 "main own" 8b "1,4" 64
device_model_rounds 2 "main own" 70b 1 32
device_end
