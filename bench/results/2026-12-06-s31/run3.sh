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
timeout 150 /usr/local/cuda/bin/ncu --clock-control none --kernel-name-base demangled \
  --kernel-name "regex:exl3_gemv_int8_kernel<\\(int\\)4, \\(int\\)1, \\(bool\\)0, \\(bool\\)1>" --launch-skip 300 \
  --launch-count 2 --set full "$B/exl3-bench-lean" model --model /tmp/m8b --backend cuda --prefill 16 --prefill-repeats 1 \
  --batch 1 --decode-steps 8 --warmup 1 --step-graphs off --int8-activations auto > "$R/ncu-full-lean.txt" 2>&1
echo "ncu full lean rc $? at $SECONDS s" >> "$S"
grep -E "Duration|Local Memory Spilling Requests|L2 Compression Input|Achieved Occupancy" "$R/ncu-full-lean.txt" | head -12 >> "$S"
device_step_breakdown lean 8b 1
device_end
