#!/usr/bin/env bash
# Session 15, fourth run: the GPU tests of the tree with 8-tile stages up to K = 6 (run 3's s8k6).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name --format=csv,noheader >> $S
for t in backend_ops_gpu_test exl3_linear_gpu_test step_graph_gpu_test exl3_gemv_int8_gpu_test; do
  timeout 60 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
grep -h -A3 "Failure" $R/*.log | head -40 >> $S
cat $S
