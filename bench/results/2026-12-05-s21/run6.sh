#!/usr/bin/env bash
# Session 21, run 6: run 5's pair (kept tree: quantized split target 16384 at every width; main
# before it: 4096 at 4,4) on the 70B shape, the dual-GPU users' model, with a 4,4 cache at
# 2048-token prompts, int8 off, batch 1/4/16/32, two rounds.
# Bundle: exl3-bench (kept), exl3-bench-main (91d46d5).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
cp $B/exl3-bench $B/exl3-bench-kept
$B/exl3-bench make-model --shape llama-3.1-70b --out /tmp/m70 > $R/make-70b.log 2>&1; echo "make 70b rc $?" >> $S
for round in 1 2; do
  for v in main kept; do
    log=$R/70b-p2048-$v-$round.log
    timeout 200 $B/exl3-bench-$v model --model /tmp/m70 --backend cuda --prefill 128 --prefill-repeats 1 \
      --batch 1,4,16,32 --decode-prompt 2048 --decode-steps 16 --int8-activations off --cache-bits 4 > $log 2>&1
    echo "70b p2048 off cache 4 $v round $round: $(grep -E 'decode batch' $log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
