#!/usr/bin/env bash
# Session 8 on one H200, sixth run: the final tree (int8 activations up to 8 rows). GPU tests of
# the tree; the int8 linear at 1 row, K=2..8 on the 70B matrices; the 8B model (int8 off: batch
# 1-64, prefill 128/2048; auto: batch 1-32); the 70B model (auto, batch 1 and 32). Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in backend_ops_gpu_test exl3_gemv_int8_gpu_test step_graph_gpu_test; do
  timeout 120 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
timeout 100 $B/exl3-bench-final gemv --bits 2,3,4,5,6,7,8 --codebooks mul1 --shapes 8192x28672,28672x8192 --rows 1 --int8 \
  --no-check --json $R/gemv-final.json --markdown $R/gemv-final.md > $R/gemv-final.log 2>&1; echo "gemv rc $?" >> $S
grep -E '^\| linear-int8 ' $R/gemv-final.md | awk -F'|' '{printf "  %s K%s r%s %s us %s Gw/ms\n",$3,$4,$6,$7,$9}' >> $S
M8=/tmp/m8
$B/exl3-bench-final make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
timeout 90 $B/exl3-bench-final model --model $M8 --backend cuda --prefill 128,2048 --prefill-repeats 2 --batch 1,4,8,16,32,64 \
  --decode-steps 16 --int8-activations off --json $R/model-8b-off.json --markdown $R/model-8b-off.md > $R/model-8b-off.log 2>&1
echo "model 8b off rc $?" >> $S; grep -E 'decode batch|prefill ' $R/model-8b-off.log | sed "s/^/  off /" >> $S
timeout 60 $B/exl3-bench-final model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,8,16,32 \
  --decode-steps 16 --int8-activations auto --json $R/model-8b-auto.json --markdown $R/model-8b-auto.md > $R/model-8b-auto.log 2>&1
echo "model 8b auto rc $?" >> $S; grep -E 'decode batch' $R/model-8b-auto.log | sed "s/^/  auto /" >> $S
rm -rf $M8
cp $S $R/; tar -C $OUT -cJf $OUT/results.tar.xz r
M70=/tmp/m70
$B/exl3-bench-final make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $?" >> $S
timeout 100 $B/exl3-bench-final model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,32 --decode-steps 16 \
  --int8-activations auto --json $R/model-70b-auto.json --markdown $R/model-70b-auto.md > $R/model-70b-auto.log 2>&1
echo "model 70b auto rc $?" >> $S; grep -E 'decode batch' $R/model-70b-auto.log | sed "s/^/  auto /" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
