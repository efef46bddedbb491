#!/usr/bin/env bash
# Session 30, run 3 (prepared, not run: the session's device time ran out): the one-row matmul
# finishing its own outputs, in two forms, against main, after run 2 found the first form slower
# (36.9 us a launch against 18.2; every warp's __threadfence() was MEMBAR.SC.GPU + an L1 flush):
#   own     branch s30-own-output (head): a warp at a time, acquire-release fences
#   ownblk  branch s30-own-block: a block at a time, one arrival a block a round after a barrier
# Bundle: exl3-bench-main (main), exl3-bench-own, exl3-bench-ownblk, and each branch's
# exl3_gemv_int8_gpu_test, backend_ops_gpu_test and llama_model_gpu_test with the suffix -own /
# -ownblk. GPU tests of both, three rounds of the 8B at batch 1 and 4, two of the 70B at batch 1,
# and where own's kernel time goes (Nsight Compute) for the faster.
set -u
. bench/device_run.sh
device_begin
for v in own ownblk; do
  device_gpu_tests exl3_gemv_int8_gpu_test-$v backend_ops_gpu_test-$v llama_model_gpu_test-$v
done
device_model_rounds 3 "main own ownblk" 8b "1,4" 64
device_model_rounds 2 "main own ownblk" 70b 1 32
device_step_breakdown ownblk 8b 1
device_end
