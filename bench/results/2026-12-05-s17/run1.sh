#!/usr/bin/env bash
# Session 17, run 1: the gated product's input hand-off (branch s17-input-handoff: the gate/up
# output pass stages down_proj's input). GPU tests of the branch, then 8B decode with the hand-off
# (exl3-bench) against the same tree with it disabled (exl3-bench-nohandoff: cuda_input_handoff
# refusing every row count), int8 off and auto, three rounds of 64 steps.
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
grep -h "FAIL" $R/backend_ops_gpu_test.log | head -20 >> $S
grep -h "input_handoff" $R/backend_ops_gpu_test.log | grep -E "_m(1|8|64)_|int8" | head -40 >> $S
ab() {  # variant mode batches tag
  [ $SECONDS -lt 430 ] || { echo "ab $4 $1 skipped (time)" >> $S; return; }
  timeout 90 $B/$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps $([ "${4#70b}" != "$4" ] && echo 16 || echo 64) --int8-activations $2 --json $R/ab-$4-$1.json > $R/ab-$4-$1.log 2>&1
  echo "ab $4 $1 rc $?" >> $S; grep -E 'decode batch' $R/ab-$4-$1.log | sed "s/^/  $4 $1 /" >> $S
}
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
for r in 1 2 3; do
  for v in exl3-bench-nohandoff exl3-bench; do
    ab $v off 1,2,4,8,16,32,64 off$r
    ab $v auto 1,2,4,8 auto$r
  done
done
rm -rf $M8
if [ $SECONDS -lt 300 ]; then
  M8=/tmp/m70
  $B/exl3-bench make-model --shape llama-3.1-70b --out $M8 > $R/make-70b.log 2>&1; echo "make 70b rc $? at $SECONDS s" >> $S
  for v in exl3-bench-nohandoff exl3-bench; do ab $v auto 1,4 70b-auto; ab $v off 1 70b-off; done
  rm -rf $M8
fi
echo "done at $SECONDS s" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
