#!/usr/bin/env bash
# Session 17, prepared and not yet run (no device time left): the GPU tests of the tree after
# run 4, whose backend ops test added the input hand-off together with the next norm's hand-off in
# one linear_add (CudaInputHandoff at 2-8 rows, the *_norm cases) and shared the int8 tests'
# helpers. Bundle: backend_ops_gpu_test, step_graph_gpu_test, llama_model_gpu_test.
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
grep -h "int8_input_handoff\|input_handoff.*norm" $R/backend_ops_gpu_test.log | head -60 >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
