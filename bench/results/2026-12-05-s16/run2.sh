#!/usr/bin/env bash
# Session 16, second run: run 1's attention A/B (main vs -attn32) with 4 rounds of 64 decode steps.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
ab() {  # variant batches tag [extra]
  [ $SECONDS -lt 520 ] || { echo "ab $3 $1 skipped (time)" >> $S; return; }
  timeout 90 $B/$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $2 \
    --decode-steps 64 --int8-activations auto ${4:-} --json $R/ab-$3-$1.json > $R/ab-$3-$1.log 2>&1
  echo "ab $3 $1 rc $?" >> $S; grep -E 'decode batch' $R/ab-$3-$1.log | sed "s/^/  $3 $1 /" >> $S
}
M8=/tmp/m8
[ -d $M8 ] || $B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1
for r in 1 2 3 4; do
  for v in exl3-bench exl3-bench-attn32; do ab $v 1,8 c32r$r; done
  for v in exl3-bench-attn32 exl3-bench; do ab $v 1,8 c512r$r "--decode-prompt 512"; done
  for v in exl3-bench exl3-bench-attn32; do ab $v 1,4 c2kr$r "--decode-prompt 2048"; done
done
echo "done at $SECONDS s" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
