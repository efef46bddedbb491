#!/usr/bin/env bash
# Session 31, run 3: the one-row int8 matmul finishing its own outputs block by block without
# local memory on the common path (lean, branch s31-own-lean: run 2 found ownblk's warps each
# storing ~25 spilled words to local memory after the matmul, 6.5 MB written to L2 a launch),
# against main. Bundle: exl3-bench-main, exl3-bench-lean, exl3_gemv_int8_gpu_test-lean,
# llama_model_gpu_test-lean, backend_ops_gpu_test-lean.
set -u
. bench/device_run.sh
device_begin
device_gpu_tests exl3_gemv_int8_gpu_test-lean llama_model_gpu_test-lean backend_ops_gpu_test-lean
device_model_rounds 3 "main lean" 8b "1,4" 64
device_model_rounds 2 "main lean" 70b 1 32
device_one_row_sections lean
device_step_breakdown lean 8b 1
device_end
