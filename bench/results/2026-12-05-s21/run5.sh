#!/usr/bin/env bash
# Session 21, run 5: the kept tree (quantized split target 16384 at every width) against main
# before it (exl3-bench-main, 4096 at 4,4) at short contexts, where 4,4 now also splits more:
# 8B, int8 off, cache 4,4, 32- and 128-token prompts, batch 1-64, two rounds.
# Bundle: exl3-bench (kept), exl3-bench-main (91d46d5).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
cp $B/exl3-bench $B/exl3-bench-kept
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for round in 1 2; do
  for p in 32 128; do
    for v in main kept; do
      log=$R/p$p-$v-$round.log
      timeout 90 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 \
        --batch 1,4,16,32,64 --decode-prompt $p --decode-steps 32 --int8-activations off --cache-bits 4 > $log 2>&1
      echo "8b p$p off cache 4 $v round $round: $(grep -E 'decode batch' $log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
    done
  done
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
