#!/usr/bin/env bash
# Session 7 on one H200, ninth run: the fp16 few-rows kernel's staged A in dynamic shared memory,
# sized by what the resident blocks leave (17-64 rows: slices as long as 1-16 rows take, fewer
# partial products) against v7. GPU tests of the tree; the fp16 matmul at 16-64 rows; the 8B model
# with int8 off at batch 16-64.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_linear_gpu_test backend_ops_gpu_test step_graph_gpu_test; do
  timeout 100 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
M8=/tmp/m8
$B/exl3-bench-v7 make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for v in v7 dyn; do
  timeout 40 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --shapes 4096x28672,14336x4096 --rows 16,32,64 --no-check \
    --markdown $R/gemv-$v.md > $R/gemv-$v.log 2>&1
  grep -E '^\| gemm ' $R/gemv-$v.md | awk -v v=$v -F'|' '{printf "  %s %s K%s r%s %s us %s Gw/ms\n",v,$3,$4,$6,$7,$9}' >> $S
  timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --batch 16,32,64 --decode-steps 16 \
    --int8-activations off --json $R/model-8b-$v.json --markdown $R/model-8b-$v.md > $R/model-8b-$v.log 2>&1
  echo "model 8b $v rc $?" >> $S; grep -E 'decode batch' $R/model-8b-$v.log | sed "s/^/  $v /" >> $S
done
cp $S $R/
tar -C $OUT -czf $OUT/results.tar.gz r && rm -rf $R
cat $S
