#!/usr/bin/env bash
# Session 18, run 1: the GPU tests of HEAD 3f8cf10 (session 17's run5.sh: the input hand-off with
# the next norm's hand-off in one linear_add, and the review commits that share stage_input_block
# and handoff_layout), then 8B int8 auto decode at batch 1-8, two rounds, against session 17's
# run 4 (349.8 / 671.9 / 1,007.8 / 1,238.9 / 1,579.7 tokens/s at batch 1-5, H100).
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
grep -h "OK \].*[Hh]andoff" $R/backend_ops_gpu_test.log | wc -l | sed 's/^/handoff cases ok: /' >> $S
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for round in 1 2; do
  timeout 90 $B/exl3-bench model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 \
    --batch 1,2,3,4,5,8 --decode-steps 64 --int8-activations auto > $R/auto$round.log 2>&1
  echo "round $round" >> $S; grep -E 'decode batch' $R/auto$round.log >> $S
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
