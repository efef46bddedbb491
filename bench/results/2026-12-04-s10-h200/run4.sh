#!/usr/bin/env bash
# Session 10 on one H200, fourth run: the few-rows matmul's prologue made cheaper (pro, against
# base = a69121a): the slice's constants (suh, the fused RMSNorm's weight) prefetched into L1 before
# the wait and ahead of the trellis stages; the fused RMSNorm's sum with all of a thread's loads in
# flight (float4, one round trip); the int8 staging without its zeroing and row-bias barriers (the
# bias summed per lane after the one barrier). GPU tests of pro, the linear at 1-2 rows, the 8B
# decode at batch 1-2 (int8 auto) and 1 (off), two rounds.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_gemv_int8_gpu_test exl3_linear_gpu_test backend_ops_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
grep -E '^\[  FAILED  \]' $R/*.log | head -20 >> $S
V="base pro"
gemv() {  # variant round
  timeout 100 $B/exl3-bench-$1 gemv --bits 4 --codebooks mul1 --int8 --rows 1,2 \
    --shapes 8192x28672,28672x8192,4096x28672,14336x4096,4096x6144,4096x4096 \
    --json $R/gemv-$1-$2.json --markdown $R/gemv-$1-$2.md > $R/gemv-$1-$2.log 2>&1
  echo "gemv $1 $2 rc $?" >> $S
  grep -E '^\| linear-int8 ' $R/gemv-$1-$2.md | awk -F'|' -v v=$1 '{printf "  %s %s K%s r%s %s Gw/ms\n",v,$3,$4,$6,$9}' >> $S
}
M8=/tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
run() {  # variant mode batches tag
  timeout 90 $B/exl3-bench-$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/model-$1-$2-$4.json --markdown $R/model-$1-$2-$4.md > $R/model-$1-$2-$4.log 2>&1
  echo "model $1 $2 $4 rc $?" >> $S; grep -E 'decode batch' $R/model-$1-$2-$4.log | sed "s/^/  $1 $2 /" >> $S
}
for round in a b; do for v in $V; do gemv $v $round; run $v auto 1,2 $round; run $v off 1,2 $round; done; done
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
