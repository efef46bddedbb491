#!/usr/bin/env bash
# Session 26, run 6: run 5 measured sq2 +1.9% (8B) / +0.7% (70B) at batch 1 with int8 off but -1.0%
# / -0.9% with int8 auto, one 8B round 353 against ~362; five more alternating rounds of batch 1
# (8B int8 auto and off, 128 decode steps each; 70B int8 auto) with run 5's binaries.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
M8=/tmp/m8; M70=/tmp/m70
$B/exl3-bench-main make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
for r in 1 2 3 4 5; do for v in main sq2; do for i8 in auto off; do
  timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 \
    --decode-steps 128 --int8-activations $i8 > $R/m8-$v-$i8-$r.log 2>&1
  echo "8b $i8 $v r$r rc $?: $(grep -E 'decode batch' $R/m8-$v-$i8-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done; done
echo "8b done at $SECONDS s" >> $S
$B/exl3-bench-main make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $? at $SECONDS s" >> $S
for r in 1 2 3; do for v in main sq2; do
  timeout 60 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 \
    --decode-steps 32 --int8-activations auto > $R/m70-$v-auto-$r.log 2>&1
  echo "70b auto $v r$r rc $?: $(grep -E 'decode batch' $R/m70-$v-auto-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done
rm -rf $M70
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
