#!/usr/bin/env bash
# Session 11 on one H200, first run: int8 activations up to 32 rows with the quantized input
# prestaged (exl3-bench = from 3 rows, exl3-bench-p9 = from 9 rows) against base (fb9a858 with this
# session's gemv bench, int8 at most 8 rows). The int8 GPU tests first; the whole MUL1 linear
# (fp16 and int8 activations) at 1-32 rows on the 8B's matrices; 8B decode. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_gemv_int8_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
for v in exl3-bench-base exl3-bench exl3-bench-p9; do
  timeout 100 $B/$v gemv --bits 4 --codebooks mul1 --int8 --no-check --rows 1,4,8,16,32 \
    --shapes 4096x4096,4096x28672,14336x4096 --json $R/gemv-$v.json --markdown $R/gemv-$v.md > $R/gemv-$v.log 2>&1
  echo "gemv $v rc $?" >> $S
  grep -E '^\| linear-(int8|f16) ' $R/gemv-$v.md | awk -F'|' -v v=$v '{printf "  %s %s %s r%s %s Gw/ms %s us\n",v,$2,$3,$6,$9,$7}' >> $S
done
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
ab() {  # variant mode batches
  timeout 90 $B/$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/ab-$1-$2.json --markdown $R/ab-$1-$2.md > $R/ab-$1-$2.log 2>&1
  echo "ab $1 $2 rc $?" >> $S; grep -E 'decode batch' $R/ab-$1-$2.log | sed "s/^/  $1 $2 /" >> $S
}
ab exl3-bench-base auto 1,4,8,16,32
ab exl3-bench auto 1,4,8,16,32
ab exl3-bench-p9 auto 4,8,16,32
ab exl3-bench off 16,32
ab exl3-bench-base auto 1,4,8,16,32
ab exl3-bench auto 1,4,8,16,32
rm -rf $M8
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
