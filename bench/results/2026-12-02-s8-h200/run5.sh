#!/usr/bin/env bash
# Session 8 on one H200, fifth run. Binaries (exl3-bench-<v>):
#   t2c: f8c44b7 (run 4's t2, committed)
#   o1:  t2c + the output pass giving each (row, 128-column) output 1-8 warps by its slices and the
#        launch's size (8 always before), so 32 rows take one warp an output, 8 outputs a block
# GPU tests of o1's tree; the 8B model (int8 off: batch 1-64 and prefill 128/2048; auto: batch 1-16)
# for both; the 70B model (off and auto, batch 1 and 32) for o1. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_linear_gpu_test backend_ops_gpu_test cuda_ops_gpu_test step_graph_gpu_test exl3_gemv_int8_gpu_test \
         gemv_bench_gpu_test quantized_cache_model_gpu_test llama_model_gpu_test; do
  timeout 120 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
M8=/tmp/m8
$B/exl3-bench-o1 make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for v in t2c o1; do
  timeout 90 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128,2048 --prefill-repeats 2 --batch 1,4,8,16,32,64 \
    --decode-steps 16 --int8-activations off --json $R/model-8b-off-$v.json --markdown $R/model-8b-off-$v.md > $R/model-8b-off-$v.log 2>&1
  echo "model 8b off $v rc $?" >> $S; grep -E 'decode batch|prefill ' $R/model-8b-off-$v.log | sed "s/^/  $v /" >> $S
  timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,8,16 \
    --decode-steps 16 --int8-activations auto --json $R/model-8b-auto-$v.json --markdown $R/model-8b-auto-$v.md > $R/model-8b-auto-$v.log 2>&1
  echo "model 8b auto $v rc $?" >> $S; grep -E 'decode batch' $R/model-8b-auto-$v.log | sed "s/^/  $v /" >> $S
done
rm -rf $M8
cp $S $R/; tar -C $OUT -cJf $OUT/results.tar.xz r
M70=/tmp/m70
$B/exl3-bench-o1 make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $?" >> $S
for i8 in auto off; do
  timeout 100 $B/exl3-bench-o1 model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,32 --decode-steps 16 \
    --int8-activations $i8 --json $R/model-70b-$i8-o1.json --markdown $R/model-70b-$i8-o1.md > $R/model-70b-$i8-o1.log 2>&1
  echo "model 70b $i8 o1 rc $?" >> $S; grep -E 'decode batch' $R/model-70b-$i8-o1.log | sed "s/^/  o1 $i8 /" >> $S
done
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
