#!/usr/bin/env bash
# Session 11 on one H200, second run (run 1's binaries): where prestaging the int8 input starts to
# pay, 4-8 rows: the whole MUL1 linear and the 8B decode at batch 4-8, prestaged from 3 rows
# (exl3-bench) against from 9 (exl3-bench-p9), two rounds. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
for v in exl3-bench exl3-bench-p9; do
  timeout 100 $B/$v gemv --bits 4 --codebooks mul1 --int8 --no-check --rows 4,5,6,7,8 \
    --shapes 4096x4096,4096x6144,4096x28672,14336x4096 --json $R/gemv-$v.json --markdown $R/gemv-$v.md > $R/gemv-$v.log 2>&1
  echo "gemv $v rc $?" >> $S
  grep -E '^\| linear-int8 ' $R/gemv-$v.md | awk -F'|' -v v=$v '{printf "  %s %s %s r%s %s Gw/ms %s us\n",v,$2,$3,$6,$9,$7}' >> $S
done
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
ab() {  # variant mode batches round
  timeout 90 $B/$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/ab-$1-$2-$4.json --markdown $R/ab-$1-$2-$4.md > $R/ab-$1-$2-$4.log 2>&1
  echo "ab $1 $2 rc $?" >> $S; grep -E 'decode batch' $R/ab-$1-$2-$4.log | sed "s/^/  $1 $2 /" >> $S
}
for round in a b; do
  ab exl3-bench auto 4,5,6,7,8 $round
  ab exl3-bench-p9 auto 4,5,6,7,8 $round
done
rm -rf $M8
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
