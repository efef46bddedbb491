#!/usr/bin/env bash
# Session 18, run 7: decode attention at realistic contexts (the tree 399c7cc). The decode rows of
# every run so far sat at a 32-128-token context, where the KV cache is a rounding error; an agent
# farm's batch 32 at 2048 tokens reads ~8.6 GB of KV per 8B step, more than twice the weights.
# exl3-bench kernels (the attention op alone, per row count, GB/s against the copy peak) at 512,
# 2048 and 8192 keys; exl3-bench model (8B, int8 off) with 2048-token prompts at batch 1-32.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for ctx in 512 2048 8192; do
  timeout 120 $B/exl3-bench kernels --model /tmp/m8 --backend cuda --rows 1,4,16,32,64 --context $ctx --timing graph \
    --json $R/kernels-ctx$ctx.json --markdown $R/kernels-ctx$ctx.md > $R/kernels-ctx$ctx.log 2>&1
  echo "kernels ctx $ctx rc $? at $SECONDS s" >> $S; grep -i "attention" $R/kernels-ctx$ctx.md >> $S
done
timeout 200 $B/exl3-bench model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16,32 \
  --decode-prompt 2048 --decode-steps 32 --int8-activations off --json $R/model-8b-p2048.json \
  --markdown $R/model-8b-p2048.md > $R/model-8b-p2048.log 2>&1
echo "model p2048 rc $? at $SECONDS s" >> $S; grep -E "^\| [0-9]+ \| 32 " $R/model-8b-p2048.md >> $S
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
