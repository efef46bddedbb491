#!/usr/bin/env bash
# Session 18, run 11: exl3-bench model with the decode prompts prefilled in chunks (52a8b7f): the
# 8B (int8 off) at batch 64 with 2048-token prompts, which run 9 could not prefill in one step.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
timeout 100 $B/exl3-bench model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 32,64 \
  --decode-prompt 2048 --decode-steps 16 --int8-activations off --json $R/model-8b-p2048-b64.json \
  --markdown $R/model-8b-p2048-b64.md > $R/model-8b-p2048-b64.log 2>&1
echo "model rc $? at $SECONDS s" >> $S; grep -E "^\| [0-9]+ \| 16 " $R/model-8b-p2048-b64.md >> $S; tail -2 $R/model-8b-p2048-b64.log >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
