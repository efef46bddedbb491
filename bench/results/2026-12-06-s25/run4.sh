#!/usr/bin/env bash
# Session 25, run 4: the tree that lands (branch s25-int8-lean's last commit: one int8 stage size,
# two product chains for one group of rows, the lean ring and stage loop): every GPU test, then
# every target's figure (session 22's run 1, PART=targets). Bundle: exl3-bench, exl3-launch,
# exl3-coordinator, exl3-worker and the seven *_gpu_test binaries, all from that commit.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_gemv_int8_gpu_test backend_ops_gpu_test cuda_ops_gpu_test kv_quant_gpu_test quantized_cache_model_gpu_test \
         step_graph_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ') at $SECONDS s" >> $S
done
timeout 200 $B/llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*TwoPointFive* > $R/llama_model_gpu_test.log 2>&1
echo "llama_model_gpu_test rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/llama_model_gpu_test.log | tr '\n' ' ') at $SECONDS s" >> $S
grep -h -B2 -A6 "Failure" $R/*_gpu_test.log | head -40 >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
OUT=$OUT/targets; mkdir -p $OUT
PART=targets bash bench/results/2026-12-05-s22/run1.sh > /dev/null 2>&1
echo "targets at $SECONDS s" >> $S; cat $OUT/summary.txt >> $S
cat $S
