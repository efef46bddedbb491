#!/usr/bin/env bash
# Session 20, run 2: the quantized cache's split target (kSplitTargetRows, attention_quant.cu) by
# cache width. Run 1 timed 16384 against the tree's 4096: 8-bit caches gained 18-20% at 2048-8192
# keys and batch 16-64, 4-bit ones lost up to 15% at batch 4-32. Here 4096 (exl3-bench, HEAD),
# 8192 (exl3-bench-q8k) and 16384 (exl3-bench-q16k), the attention op alone at K,V widths 8, 6, 5,
# 4 and K8/V4, 2048 and 8192 keys, batch 1-64 (graph timing). Last, the F16 op at 64, 160 and 512
# keys, batch 1, 4, 16 (short contexts: where a batch-1 step's attention stands).
# Bundle: exl3-bench, exl3-bench-q8k, exl3-bench-q16k.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
cp $B/exl3-bench $B/exl3-bench-q4k
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for ctx in 2048 8192; do
  for bits in 8 6 5 4 8,4; do
    for v in q4k q8k q16k; do
      timeout 60 $B/exl3-bench-$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16,32,64 --context $ctx --timing graph \
        --cache-bits $bits --markdown $R/kernels-$v-k$bits-ctx$ctx.md > $R/kernels-$v-k$bits-ctx$ctx.log 2>&1
      echo "attention cache $bits ctx $ctx $v: $(grep -E '^\| attention' $R/kernels-$v-k$bits-ctx$ctx.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
    done
  done
done
for ctx in 64 160 512; do  # the F16 op at short contexts (a batch-1 decode's latency)
  timeout 60 $B/exl3-bench-q4k kernels --model /tmp/m8 --backend cuda --rows 1,4,16 --context $ctx --timing graph \
    --markdown $R/kernels-f16-ctx$ctx.md > $R/kernels-f16-ctx$ctx.log 2>&1
  echo "attention f16 ctx $ctx: $(grep -E '^\| attention' $R/kernels-f16-ctx$ctx.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
