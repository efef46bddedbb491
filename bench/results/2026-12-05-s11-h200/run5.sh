#!/usr/bin/env bash
# Session 11 on one H200, fifth run: the fp16 linear's input prestaged from 6 rows instead of 8,
# exl3-bench-f6 (the planner still prices partial products from 8 rows) and exl3-bench-f6p (priced
# from 6 too, kGemvPrestageMinRows = 6), against the landed tree (3babafb, exl3-bench): 8B decode
# with int8 off at batch 5-8, three rounds; first the GPU tests of the tree to land (3babafb with
# the two prestage paths' scratch carving made one, carve_prestage). Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_gemv_int8_gpu_test exl3_linear_gpu_test backend_ops_gpu_test step_graph_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
ab() {  # variant mode batches round
  timeout 90 $B/$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/ab-$1-$2-$4.json --markdown $R/ab-$1-$2-$4.md > $R/ab-$1-$2-$4.log 2>&1
  echo "ab $1 $2 rc $?" >> $S; grep -E 'decode batch' $R/ab-$1-$2-$4.log | sed "s/^/  $1 $2 /" >> $S
}
for round in a b c; do
  for v in exl3-bench exl3-bench-f6 exl3-bench-f6p; do ab $v off 5,6,7,8 $round; done
done
rm -rf $M8
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
