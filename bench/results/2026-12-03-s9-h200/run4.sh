#!/usr/bin/env bash
# Session 9 on one H200, fourth run. base = 13469c1; f1 / f4 = the fused finish (the matmul's last
# k-slice of a 128-column group finishes it: no output pass) up to 1 / 4 rows, counting with
# release atomics and one acquire fence (run 3's f1 used __threadfence: MEMBAR.SC per warp).
# GPU tests of f1; the 8B model at batch 1-8 (int8 off and auto), two rounds; a batch-1 step kernel
# by kernel (f1, off). Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_linear_gpu_test exl3_gemv_int8_gpu_test backend_ops_gpu_test step_graph_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
grep -E '^\[  FAILED  \]' $R/*.log | head -20 >> $S
M8=/tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
run() {  # variant mode batches tag
  timeout 60 $B/exl3-bench-$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/model-$1-$2-$4.json --markdown $R/model-$1-$2-$4.md > $R/model-$1-$2-$4.log 2>&1
  echo "model $1 $2 $4 rc $?" >> $S; grep -E 'decode batch' $R/model-$1-$2-$4.log | sed "s/^/  $1 $2 /" >> $S
}
for round in a b; do
  for v in base f1 f4; do run $v off 1,2,4,8 $round; run $v auto 1,4 $round; done
done
cp $S $R/; tar -C $OUT -cJf $OUT/results.tar.xz r
timeout 200 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv $B/exl3-bench-f1 model \
  --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-steps 2 --warmup 0 --int8-activations off \
  > $R/ncu-step1-f1.csv 2> $R/ncu-step1-f1.log; echo "ncu step1 rc $?" >> $S
timeout 200 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv $B/exl3-bench-base model \
  --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-steps 2 --warmup 0 --int8-activations off \
  > $R/ncu-step1-base.csv 2> $R/ncu-step1-base.log; echo "ncu step1 base rc $?" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
