#!/usr/bin/env bash
# Session 7 on one H200, last run: the final tree (v7 with the bare matmul planned as before). GPU
# tests of the touched kernels and their callers; the int8 linear K=2..8 on the 70B matrices; the
# bare fp16 matmul at 16 rows; the 8B and 70B models (int8 auto and off).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_gemv_int8_gpu_test exl3_linear_gpu_test backend_ops_gpu_test cuda_ops_gpu_test step_graph_gpu_test gemv_bench_gpu_test kernel_bench_gpu_test; do
  timeout 200 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
timeout 120 $B/exl3-bench gemv --bits 2,3,4,5,6,7,8 --codebooks mul1 --shapes 8192x28672,28672x8192 --rows 1 --int8 \
  --json $R/gemv-final.json --markdown $R/gemv-final.md > $R/gemv-final.log 2>&1; echo "gemv rc $?" >> $S
timeout 60 $B/exl3-bench gemv --bits 4 --codebooks mul1 --shapes 4096x28672 --rows 16 --no-check \
  --markdown $R/gemv-bare16.md > $R/gemv-bare16.log 2>&1
cat $R/gemv-final.md $R/gemv-bare16.md | grep -E '^\| (linear-int8|gemm) ' | awk -F'|' '{printf "  %s %s K%s r%s %s us %s Gw/ms\n",$2,$3,$4,$6,$7,$9}' >> $S
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for i8 in auto off; do
  timeout 120 $B/exl3-bench model --model $M8 --backend cuda --prefill 128,2048 --batch 1,4,16,32 --decode-steps 32 \
    --int8-activations $i8 --json $R/model-8b-$i8.json --markdown $R/model-8b-$i8.md > $R/model-8b-$i8.log 2>&1
  echo "model 8b $i8 rc $?" >> $S; grep -E 'decode batch|prefill ' $R/model-8b-$i8.log | sed "s/^/  $i8 /" >> $S
done
rm -rf $M8
M70=/tmp/m70
$B/exl3-bench make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $?" >> $S
for i8 in auto off; do
  timeout 150 $B/exl3-bench model --model $M70 --backend cuda --prefill 128 --batch 1,32 --decode-steps 16 \
    --int8-activations $i8 --json $R/model-70b-$i8.json --markdown $R/model-70b-$i8.md > $R/model-70b-$i8.log 2>&1
  echo "model 70b $i8 rc $?" >> $S; grep -E 'decode batch' $R/model-70b-$i8.log | sed "s/^/  $i8 /" >> $S
done
cp $S $R/
tar -C $OUT -czf $OUT/results.tar.gz r && rm -rf $R
cat $S
