#!/usr/bin/env bash
# Session 24, run 2: the 70B half of every target's figure (session 22's run 1, PART=targets, its
# 70B part). Bundle: exl3-bench (main).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
M70=/tmp/m70
$B/exl3-bench make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $? at $SECONDS s" >> $S
for i8 in auto off; do
  prefill="--prefill 2048 --prefill-repeats 1"; [[ $i8 == auto ]] && prefill="--prefill 128 --prefill-repeats 1"
  timeout 200 $B/exl3-bench model --model $M70 --backend cuda $prefill --batch 1,4,32 \
    --decode-steps 16 --int8-activations $i8 --json $R/model-70b-$i8.json --markdown $R/model-70b-$i8.md \
    > $R/model-70b-$i8.log 2>&1
  echo "model 70b $i8 rc $? at $SECONDS s" >> $S; grep -E 'decode batch|prefill |roofline' $R/model-70b-$i8.log | sed "s/^/  $i8 /" >> $S
done
echo "done at $SECONDS s" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
