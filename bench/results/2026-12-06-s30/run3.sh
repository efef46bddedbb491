#!/usr/bin/env bash
# Session 30, run 3 (after run 2 and an Nsight Compute breakdown of own, 36.9 us an int8 launch
# against main's 18.2: __threadfence's MEMBAR.SC.GPU): own with acquire-release fences against
# main, GPU tests of own's build, three rounds of the 8B at batch 1 and 4, one of the 70B.
set -u
. bench/device_run.sh
device_begin
device_gpu_tests exl3_gemv_int8_gpu_test backend_ops_gpu_test llama_model_gpu_test
device_model_rounds 3 "main own" 8b "1,4" 64
device_model_rounds 1 "main own" 70b 1 32
device_end
