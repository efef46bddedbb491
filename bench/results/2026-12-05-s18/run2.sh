#!/usr/bin/env bash
# Session 18, run 2: hand-offs voided by a use of the linear scratch in between (the CUDA backend's
# linear_scratch_uses_). GPU tests of the tree; the new intervened cases also with the voiding
# disabled (backend_ops_gpu_test-nofix: the consumers take a stale hand-off, as before) to show
# they catch it; one round of 8B int8 auto decode at batch 1-8.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
t() {  # binary [args]
  local start=$SECONDS
  timeout 150 $B/$1 "${@:2}" > $R/$1.log 2>&1
  echo "$1 rc $? $((SECONDS - start)) s $(grep -E '^\[  (PASSED|FAILED) ' $R/$1.log | tr '\n' ' ')" >> $S
}
t backend_ops_gpu_test
t step_graph_gpu_test
t llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*
grep -h -B2 -A6 "Failure" $R/*.log | head -60 >> $S
grep -h "intervened" $R/backend_ops_gpu_test.log | head -40 >> $S
t backend_ops_gpu_test-nofix --gtest_filter=CudaInputHandoff.*:Cuda/*intervened*
grep -h "intervened.*non-finite\|intervened.*FAIL" $R/backend_ops_gpu_test-nofix.log | head -20 >> $S
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
timeout 90 $B/exl3-bench model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 \
  --batch 1,2,3,4,5,8 --decode-steps 64 --int8-activations auto > $R/auto.log 2>&1
grep -E 'decode batch' $R/auto.log >> $S
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
