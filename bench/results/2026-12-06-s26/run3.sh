#!/usr/bin/env bash
# Session 26, run 3: nl (branch s26-norm-loads: the fused RMSNorm of the 1-2-row matmuls issues a
# thread's loads of a row 16 at a time, one round trip for 4096 features instead of two; the same
# sum order) against main 7eef708, three rounds of the 8B decode at batch 1-2 with int8 auto and
# off, two of the 70B at batch 1. Bundle: exl3-bench (main), exl3-bench-nl.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
M8=/tmp/m8; M70=/tmp/m70
$B/exl3-bench-main make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
for r in 1 2 3; do for v in main nl; do for i8 in auto off; do
  timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2 \
    --decode-steps 64 --int8-activations $i8 > $R/m8-$v-$i8-$r.log 2>&1
  echo "8b $i8 $v r$r rc $?: $(grep -E 'decode batch' $R/m8-$v-$i8-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done; done
echo "8b done at $SECONDS s" >> $S
$B/exl3-bench-main make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $? at $SECONDS s" >> $S
for r in 1 2; do for v in main nl; do for i8 in auto off; do
  timeout 60 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 \
    --decode-steps 16 --int8-activations $i8 > $R/m70-$v-$i8-$r.log 2>&1
  echo "70b $i8 $v r$r rc $?: $(grep -E 'decode batch' $R/m70-$v-$i8-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done; done
rm -rf $M70
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
