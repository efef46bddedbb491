#!/usr/bin/env bash
# Session 8 on one H200, third run. Binaries (exl3-bench-<v>):
#   p1:  000270f (run 2's p1, committed)
#   s2:  p1 + the fp16 linear's A staged once ahead of the matmul (exl3_gemv_stage.cu) from 2 rows
#   s17: the same from 17 rows (two or more m-blocks)
# GPU tests of s2's tree; the 8B model with int8 off at batch 1-64 for each; a batch-32 decode step
# kernel by kernel (s2); the 70B model with int8 off at batch 1 and 32 (p1, s2). Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_linear_gpu_test backend_ops_gpu_test step_graph_gpu_test exl3_gemv_int8_gpu_test gemv_bench_gpu_test \
         llama_model_gpu_test; do
  timeout 120 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
M8=/tmp/m8
$B/exl3-bench-p1 make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for v in p1 s2 s17; do
  timeout 80 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16,32,64 \
    --decode-steps 16 --int8-activations off --json $R/model-8b-off-$v.json --markdown $R/model-8b-off-$v.md > $R/model-8b-off-$v.log 2>&1
  echo "model 8b off $v rc $?" >> $S; grep -E 'decode batch' $R/model-8b-off-$v.log | sed "s/^/  $v /" >> $S
done
timeout 200 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv \
  $B/exl3-bench-s2 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 32 --decode-steps 2 \
  --warmup 0 --int8-activations off > $R/ncu-step32-s2.csv 2> $R/ncu-step32-s2.log; echo "ncu step32 s2 rc $?" >> $S
rm -rf $M8
cp $S $R/; tar -C $OUT -cJf $OUT/results.tar.xz r
M70=/tmp/m70
$B/exl3-bench-p1 make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $?" >> $S
for v in p1 s2; do
  timeout 100 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,32 --decode-steps 16 \
    --int8-activations off --json $R/model-70b-off-$v.json --markdown $R/model-70b-off-$v.md > $R/model-70b-off-$v.log 2>&1
  echo "model 70b off $v rc $?" >> $S; grep -E 'decode batch' $R/model-70b-off-$v.log | sed "s/^/  $v /" >> $S
done
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
