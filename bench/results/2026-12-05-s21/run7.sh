#!/usr/bin/env bash
# Session 21, run 7: quantized caches at small batches are slower than F16 pages (8B, 2048-token
# prompts, batch 1: 4,4 246, 8,8 239 against 296 tokens/s; the op at 2048 keys batch 1 18.0 / 19.2
# against 13.0 us). At batch 1 every split is one 32-key block (kMinKeysPerSplit), so each block's
# fixed cost (the tile dequantization's set-up) is paid 64 times. Variants of the kept tree with
# at least 2 (exl3-bench-mk2) or 4 (exl3-bench-mk4) blocks a split for quantized caches: the op at
# 2048 keys (4,4 and 8,8) and the 8B with 4,4 and 8,8 caches at 2048-, 512- and 32-token prompts,
# batch 1 / 4 / 16, int8 off, two rounds.
# Bundle: exl3-bench (kept, 2ef4221), exl3-bench-mk2, exl3-bench-mk4.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
cp $B/exl3-bench $B/exl3-bench-kept
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for bits in 4 8; do
  for v in kept mk2 mk4; do
    timeout 60 $B/exl3-bench-$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16 --context 2048 --timing graph \
      --cache-bits $bits --markdown $R/kernels-$v-k$bits.md > $R/kernels-$v-k$bits.log 2>&1
    echo "attention cache $bits ctx 2048 $v: $(grep -E '^\| attention' $R/kernels-$v-k$bits.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
  done
done
for round in 1 2; do
  for bits in 4 8; do
    for p in 2048 512 32; do
      for v in kept mk2 mk4; do
        log=$R/p$p-k$bits-$v-$round.log
        timeout 90 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16 \
          --decode-prompt $p --decode-steps 32 --int8-activations off --cache-bits $bits > $log 2>&1
        echo "8b p$p off cache $bits $v round $round: $(grep -E 'decode batch' $log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
      done
    done
  done
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
