#!/usr/bin/env bash
# Session 8 on one H200, first run. Binaries: base = ed0d4f2; v1 = the fp16 GEMV's A staging with
# its loads issued 4 jobs at a time. GPU tests of v1; the fp16 matmul at 16-64 rows; the 8B model
# at batch 1-32 (int8 off) for both; one batch-32 decode step kernel by kernel (base), and the
# 4 GEMV launches of one layer at batch 32 with Nsight Compute's full set (v1). Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_linear_gpu_test backend_ops_gpu_test; do
  timeout 100 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
M8=/tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for v in base v1; do
  timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,16,32,64 \
    --decode-steps 16 --int8-activations off --json $R/model-8b-$v.json --markdown $R/model-8b-$v.md > $R/model-8b-$v.log 2>&1
  echo "model 8b $v rc $?" >> $S; grep -E 'decode batch' $R/model-8b-$v.log | sed "s/^/  $v /" >> $S
done
NCU="/usr/local/cuda/bin/ncu --clock-control none"
timeout 200 $NCU --metrics gpu__time_duration.sum --csv \
  $B/exl3-bench-base model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 32 --decode-steps 2 \
  --warmup 0 --int8-activations off > $R/ncu-step32-base.csv 2> $R/ncu-step32-base.log; echo "ncu step32 rc $?" >> $S
timeout 200 $NCU --set full --kernel-name regex:exl3_gemv_kernel --launch-skip 200 --launch-count 4 -o $R/gemv32-v1 \
  $B/exl3-bench-v1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 32 --decode-steps 4 \
  --warmup 0 --int8-activations off > $R/ncu-gemv32-v1.log 2>&1; echo "ncu gemv32 rc $?" >> $S
$NCU -i $R/gemv32-v1.ncu-rep --page details --csv > $R/gemv32-v1-details.csv 2>&1
$NCU -i $R/gemv32-v1.ncu-rep --page source --csv --print-source sass > $R/gemv32-v1-sass.csv 2>&1; echo "sass rc $?" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
