#!/usr/bin/env bash
# Session 18, run 8: decode attention's split target. Run 7 found the decode attention at 63% of
# the copy peak at batch 32 and 2048 keys (142.6 us a layer; 4.6 ms of the 10.0 ms 8B step): the
# plan splits a token's keys while tokens · query heads < kTargetRows (4096), but a warp takes a
# KV head's whole group, so batch 32 gets 4 splits, 1,024 one-warp blocks: 1.3 waves at the 6
# blocks an SM holds. Variants: base (4096), t8k (8192), t16k (16384). Attention op alone at 512,
# 2048, 8192 keys; the 8B (int8 off) with 2048-token prompts at batch 1-32 and at the default
# 32-token prompt at batch 1-32.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
$B/exl3-bench-base make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for ctx in 512 2048 8192; do
  for v in base t8k t16k; do
    timeout 60 $B/exl3-bench-$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16,32,64 --context $ctx --timing graph \
      --markdown $R/kernels-$v-ctx$ctx.md > $R/kernels-$v-ctx$ctx.log 2>&1
    echo "attention ctx $ctx $v: $(grep -E '^\| attention' $R/kernels-$v-ctx$ctx.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
  done
done
for round in 1 2; do
  for v in base t8k t16k; do
    timeout 90 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16,32 \
      --decode-prompt 2048 --decode-steps 32 --int8-activations off > $R/p2048-$v-$round.log 2>&1
    echo "8b p2048 $v round $round: $(grep -E 'decode batch' $R/p2048-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
for v in base t8k t16k; do
  timeout 60 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16,32 \
    --decode-steps 32 --int8-activations off > $R/p32-$v.log 2>&1
  echo "8b p32 $v: $(grep -E 'decode batch' $R/p32-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
