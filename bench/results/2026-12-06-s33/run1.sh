#!/usr/bin/env bash
# Session 33, run 1: the output passes fetch the start of the next linears' weights into L2
# (cp.async.bulk.prefetch.L2 before they wait for their matmul; branch s33-l2-prefetch), so that
# the memory works while a step runs its passes, attention and merge. EXL3_L2_PREFETCH_MB caps the
# bytes a pass asks for (0: none). 8B int8 auto at batch 1 / 4 / 32 and the 70B at batch 1 / 32,
# alternating rounds; first the backend ops GPU test of the branch (the hint changes no result).
# Bundle: exl3-bench-main (main cba9b97), exl3-bench-pf and backend_ops_gpu_test (the branch).
set -u
. bench/device_run.sh
device_begin
device_gpu_tests backend_ops_gpu_test
P=pf:EXL3_L2_PREFETCH_MB
device_model_rounds 3 "main $P=0 $P=8 $P=16 $P=32" 8b "1,4,32" 32
device_model_rounds 2 "main $P=16 $P=32" 70b "1,32" 16
device_h200_targets main
device_end
