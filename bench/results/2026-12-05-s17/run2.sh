#!/usr/bin/env bash
# Session 17, run 2: the input hand-off as kept (int8 consumers at 1-4 rows only,
# kGemvInputHandoffMaxRows): the GPU tests, then 8B int8 auto batch 1-4 against the tree without it
# (exl3-bench-nohandoff of run 1), two rounds.
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
grep -h "int8_input_handoff" $R/backend_ops_gpu_test.log | head -40 >> $S
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
for r in 1 2; do for v in exl3-bench-nohandoff exl3-bench; do
  [ $SECONDS -lt 200 ] || break
  timeout 60 $B/$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2,3,4,5 \
    --decode-steps 64 --int8-activations auto --json $R/ab-auto$r-$v.json > $R/ab-auto$r-$v.log 2>&1
  echo "ab auto$r $v rc $?" >> $S; grep -E 'decode batch' $R/ab-auto$r-$v.log | sed "s/^/  auto$r $v /" >> $S
done; done
rm -rf $M8
echo "done at $SECONDS s" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
