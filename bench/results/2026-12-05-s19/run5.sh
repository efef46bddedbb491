#!/usr/bin/env bash
# Session 19, run 5: run 4's final ran slower than load where both run the same merge (the serial
# one, at most 32 splits: 512 keys batch 1 8.16 against 6.85 us). The same binaries alternated
# twice, to tell the binaries from the processes; then the 8B with both at 512- and 2048-token
# prompts, batch 1 / 4 / 16.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
$B/exl3-bench-final make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for round in 1 2; do
  for ctx in 512 2048; do
    for v in load final; do
      timeout 60 $B/exl3-bench-$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16,32,64 --context $ctx --timing graph \
        --markdown $R/kernels-$v-ctx$ctx-$round.md > $R/kernels-$v-ctx$ctx-$round.log 2>&1
      echo "attention ctx $ctx $v round $round: $(grep -E '^\| attention' $R/kernels-$v-ctx$ctx-$round.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
    done
  done
done
for p in 512 2048; do
  for v in load final; do
    timeout 60 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16 \
      --decode-prompt $p --decode-steps 64 --int8-activations auto > $R/p$p-$v.log 2>&1
    echo "8b p$p auto $v: $(grep -E 'decode batch' $R/p$p-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
