#!/usr/bin/env bash
# Session 10 on one H200, ninth run (twice: the second time with rotate_pair uncontracted): GPU
# tests of the committed tree (15a600a plus the test's exact
# comparison of the fused q/k/v + RoPE + cache write against Backend's composition).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in backend_ops_gpu_test step_graph_gpu_test quantized_cache_model_gpu_test exl3_linear_gpu_test exl3_gemv_int8_gpu_test \
         cuda_ops_gpu_test kv_quant_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
grep -E '^\[  FAILED  \]' $R/*.log | head -20 >> $S
grep -E 'norm_qkv_rope.*as_composed' $R/backend_ops_gpu_test.log | head -12 >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
