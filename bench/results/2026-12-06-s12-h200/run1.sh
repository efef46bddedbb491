#!/usr/bin/env bash
# Session 12 on one H200, first run: the norm hand-off (a linear_add's output pass does the next
# RMSNorm and stages its linears' inputs, exl3_gemv_output_norm.cu). exl3-bench is the tree with it,
# exl3-bench-nohf the same tree with cuda_linear_add_handoff refusing every hand-off. GPU tests of
# the tree, then 8B decode at batch 1-8 with int8 off and auto, two rounds. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export PATH=$B:$PATH EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in backend_ops_gpu_test exl3_gemv_int8_gpu_test exl3_linear_gpu_test step_graph_gpu_test \
  quantized_cache_model_gpu_test llama_model_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
grep -E "FAIL|handoff.*(nmse|FAIL)" $R/backend_ops_gpu_test.log | grep -E "FAIL" | head -20 >> $S
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
ab() {  # variant mode batches round
  timeout 90 $B/$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/ab-$1-$2-$4.json --markdown $R/ab-$1-$2-$4.md > $R/ab-$1-$2-$4.log 2>&1
  echo "ab $1 $2 rc $?" >> $S; grep -E 'decode batch' $R/ab-$1-$2-$4.log | sed "s/^/  $1 $2 /" >> $S
}
for round in a b; do
  for v in exl3-bench-nohf exl3-bench; do
    ab $v off 1,2,4,6,8 $round
    ab $v auto 1,2,4,6,8 $round
  done
done
rm -rf $M8
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
