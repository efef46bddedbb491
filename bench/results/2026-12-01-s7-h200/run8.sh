#!/usr/bin/env bash
# Session 7 on one H200, eighth run: the int8 GEMV's fused output pass (the last warp to store a
# 128-column block's partials finishes it; no output launch) against v7 (the tree before it, the
# same plans). GPU tests of the fused tree, the int8 linear at 1 row, the 8B model (int8 auto).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_gemv_int8_gpu_test exl3_linear_gpu_test backend_ops_gpu_test step_graph_gpu_test; do
  timeout 120 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
for v in v7 fused; do
  timeout 60 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --shapes 8192x28672,28672x8192,4096x28672,14336x4096,4096x6144,4096x4096 \
    --rows 1 --int8 --json $R/gemv-$v.json --markdown $R/gemv-$v.md > $R/gemv-$v.log 2>&1
  echo "gemv $v rc $?" >> $S
  grep -E '^\| linear-int8 ' $R/gemv-$v.md | awk -v v=$v -F'|' '{printf "  %s %s K%s r%s %s us %s Gw/ms\n",v,$3,$4,$6,$7,$9}' >> $S
done
M8=/tmp/m8
$B/exl3-bench-v7 make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for v in v7 fused v7 fused; do
  timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --batch 1,4,16 --decode-steps 32 \
    --int8-activations auto --json $R/model-8b-$v.json --markdown $R/model-8b-$v.md > $R/model-8b-$v.log 2>&1
  echo "model 8b $v rc $?" >> $S; grep -E 'decode batch' $R/model-8b-$v.log | sed "s/^/  $v /" >> $S
done
cp $S $R/
tar -C $OUT -czf $OUT/results.tar.gz r && rm -rf $R
cat $S
