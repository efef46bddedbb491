#!/usr/bin/env bash
# Session 34, run 3: the paged KV cache's key addressing written once (kernels/cuda/kv_page_units.cuh:
# PageUnits, BlockUnits) for both block sources of the attention kernels. The quantized source's
# cubin is byte-identical; the F16 decode kernel at D=128 is 128 bytes longer. Tests: the CUDA ops,
# KV quantization and backend ops GPU tests of the change; then the 8B decode, main against units,
# at 128-token prompts (int8 auto, batch 1 / 4 / 32) and 2048-token prompts (int8 off, batch 1 /
# 16 / 32, where attention is most of a step), alternating rounds; on an H200 the target figures.
# Bundle: exl3-bench-main (main aaaffba), exl3-bench-units and the three tests (the change).
set -u
. bench/device_run.sh
device_begin
device_gpu_tests cuda_ops_gpu_test kv_quant_gpu_test backend_ops_gpu_test
device_model_rounds 2 "main units" 8b "1,4,32" 32
for r in 1 2 3; do
  for v in main units; do
    log=$R/m8b-long-$v-$r.log
    timeout 150 "$B/exl3-bench-$v" model --model /tmp/m8b --backend cuda --prefill 2048 --prefill-repeats 1 \
      --batch 1,16,32 --decode-steps 16 --int8-activations off > "$log" 2>&1
    echo "8b long off $v r$r rc $?: $(grep -E 'decode batch' "$log" | awk '{print $(NF-1)}' | tr '\n' ' ')" >> "$S"
  done
done
device_h200_targets units
device_end
