#!/usr/bin/env bash
# Session 12 on one H200, sixth run: the review's tree (one per-block staging store shared by the
# two stage kernels and the hand-off's output pass, one sum of an output's warp groups shared by
# both output passes; same arithmetic). GPU tests; 8B decode, exl3-bench against exl3-bench-run5
# (run 5's binary), int8 off batch 1-64 and auto 1-8. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export PATH=$B:$PATH EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in backend_ops_gpu_test exl3_gemv_int8_gpu_test exl3_linear_gpu_test step_graph_gpu_test \
  quantized_cache_model_gpu_test llama_model_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
ab() {  # variant mode batches
  timeout 90 $B/$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/ab-$1-$2.json --markdown $R/ab-$1-$2.md > $R/ab-$1-$2.log 2>&1
  echo "ab $1 $2 rc $?" >> $S; grep -E 'decode batch' $R/ab-$1-$2.log | sed "s/^/  $1 $2 /" >> $S
}
for v in exl3-bench-run5 exl3-bench; do
  ab $v off 1,2,4,8,16,32,64
  ab $v auto 1,2,4,8
done
rm -rf $M8
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
