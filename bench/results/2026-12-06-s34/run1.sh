#!/usr/bin/env bash
# Session 34, run 1: session 33's run 2, which found no machine. Run 1 of session 33 asked L2 for
# the next linears' weights with cp.async.bulk.prefetch.L2 (pf) and lost 18-33% at the 8B's batch
# 1; pfl asks for the same bytes with one prefetch.global.L2 a 128-byte line (fire and forget, no
# bulk operation to complete), which tells whether the bulk requests held the passes' blocks or
# the fetched lines did not serve the next matmul. 8B int8 auto at batch 1 / 4 / 32, two
# alternating rounds; first main's backend ops GPU test, and on an H200 the target figures.
# Bundle: exl3-bench-main and backend_ops_gpu_test (main), exl3-bench-pf (s33-l2-prefetch.diff),
# exl3-bench-pfl (that diff and s33-l2-prefetch-lines.diff; both in ../2026-12-06-s33).
set -u
. bench/device_run.sh
device_begin
device_gpu_tests backend_ops_gpu_test
L=pfl:EXL3_L2_PREFETCH_MB
device_model_rounds 2 "main $L=2 $L=4 $L=8 pf:EXL3_L2_PREFETCH_MB=2" 8b "1,4,32" 32
device_h200_targets main
device_end
