#!/usr/bin/env bash
# Session 18, prepared for the next GPU session (not run: no device time left). On the tree
# 733b03d: the GPU tests this session's last commits touch and did not run on a GPU (the planner's
# reserve against the backend's counted allocations, after the attention scratch grew; the model
# tests), then the long-context rows the attention split target was chosen for, on the 8B at batch
# 64 (the chunked decode prompts) and on the 70B (group 8: batch 32 went from 2 splits to 8).
# Bundle: exl3-bench, cuda_allocation_gpu_test, llama_model_gpu_test, step_graph_gpu_test.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
t() {  # binary [args]
  local start=$SECONDS
  timeout 150 $B/$1 "${@:2}" > $R/$1.log 2>&1
  echo "$1 rc $? $((SECONDS - start)) s $(grep -E '^\[  (PASSED|FAILED) ' $R/$1.log | tr '\n' ' ')" >> $S
}
t cuda_allocation_gpu_test
t step_graph_gpu_test
t llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*
grep -h -B2 -A6 "Failure" $R/*.log | head -40 >> $S
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
timeout 150 $B/exl3-bench model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,16,32,64 \
  --decode-prompt 2048 --decode-steps 16 --int8-activations off --json $R/model-8b-p2048.json \
  --markdown $R/model-8b-p2048.md > $R/model-8b-p2048.log 2>&1
echo "8b p2048 rc $? at $SECONDS s" >> $S; grep -E "^\| [0-9]+ \| 16 " $R/model-8b-p2048.md >> $S
rm -rf /tmp/m8
$B/exl3-bench make-model --shape llama-3.1-70b --out /tmp/m70 > $R/make-70b.log 2>&1
timeout 200 $B/exl3-bench model --model /tmp/m70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,16,32 \
  --decode-prompt 2048 --decode-steps 8 --int8-activations auto --json $R/model-70b-p2048.json \
  --markdown $R/model-70b-p2048.md > $R/model-70b-p2048.log 2>&1
echo "70b p2048 rc $? at $SECONDS s" >> $S; grep -E "^\| [0-9]+ \| 8 " $R/model-70b-p2048.md >> $S
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
