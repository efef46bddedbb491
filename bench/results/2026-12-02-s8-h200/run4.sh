#!/usr/bin/env bash
# Session 8 on one H200, fourth run. Binaries (exl3-bench-<v>):
#   s2:  run 3's s2 (A prestaged from 2 rows)
#   s17: run 3's s17 (from 17 rows): the reference for 8 rows staged by the blocks themselves
#   t1:  prestaged from 8 rows; 17-32 rows (two m-blocks) stage A in what their 3 resident blocks
#        leave (74 KiB: 56-tile slices instead of 24)
#   t2:  t1 + the planner charging a prestaged slice its partial products' traffic
# GPU tests of t2's tree; the 8B model with int8 off at batch 1-64 for each, int8 auto at batch 1,
# 4, 16 (t2); a batch-32 decode step kernel by kernel (t2). Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_linear_gpu_test backend_ops_gpu_test step_graph_gpu_test exl3_gemv_int8_gpu_test gemv_bench_gpu_test \
         llama_model_gpu_test; do
  timeout 120 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
M8=/tmp/m8
$B/exl3-bench-t2 make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for v in s2 s17 t1 t2; do
  timeout 90 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,8,16,32,64 \
    --decode-steps 16 --int8-activations off --json $R/model-8b-off-$v.json --markdown $R/model-8b-off-$v.md > $R/model-8b-off-$v.log 2>&1
  echo "model 8b off $v rc $?" >> $S; grep -E 'decode batch' $R/model-8b-off-$v.log | sed "s/^/  $v /" >> $S
done
timeout 60 $B/exl3-bench-t2 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16 \
  --decode-steps 16 --int8-activations auto --json $R/model-8b-auto-t2.json --markdown $R/model-8b-auto-t2.md > $R/model-8b-auto-t2.log 2>&1
echo "model 8b auto t2 rc $?" >> $S; grep -E 'decode batch' $R/model-8b-auto-t2.log | sed "s/^/  t2 /" >> $S
timeout 200 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv \
  $B/exl3-bench-t2 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 32 --decode-steps 2 \
  --warmup 0 --int8-activations off > $R/ncu-step32-t2.csv 2> $R/ncu-step32-t2.log; echo "ncu step32 t2 rc $?" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
