#!/usr/bin/env bash
# Session 11 on one H200, seventh run (run 6's binaries, the final tree): run 6's serve with int8
# auto measured 96.0% of the model with one slow step (inter-token p99 6.75 ms); the same pair of
# measurements twice more. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export PATH=$B:$PATH
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for round in a b; do
  timeout 60 $B/exl3-bench model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-prompt 128 \
    --decode-steps 512 --warmup 1 --int8-activations auto --json $R/model-8b-ctx-auto-$round.json \
    --markdown $R/model-8b-ctx-auto-$round.md > $R/model-8b-ctx-auto-$round.log 2>&1
  echo "model 8b ctx auto $round rc $?" >> $S; grep -E 'decode batch' $R/model-8b-ctx-auto-$round.log | sed "s/^/  ctx auto /" >> $S
  timeout 120 $B/exl3-bench serve --launch "--model $M8 --gpus 0 --split 100 --max-seq-len 4096 --int8-activations auto" \
    --clients 1 --max-new-tokens 512 --json $R/serve-8b-auto-$round.json --markdown $R/serve-8b-auto-$round.md \
    > $R/serve-8b-auto-$round.log 2>&1
  echo "serve 8b auto $round rc $?" >> $S; tail -1 $R/serve-8b-auto-$round.md | sed "s/^/  auto /" >> $S
done
rm -rf $M8
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
