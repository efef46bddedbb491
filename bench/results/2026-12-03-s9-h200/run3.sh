#!/usr/bin/env bash
# Session 9 on one H200, third run: what the small kernels cost inside a decode step's graph, by
# ablation (timing only: each variant skips one kind of launch, so its outputs are wrong). base =
# 13469c1; f0 = the tree with the fused finish compiled out (as base); f1 = the fused finish for one
# row with every lane counting one n-tile (run 2's f8 counted them one after another); nonorm = no
# RMSNorm; noout = no GEMV output pass; nomerge = no attention merge; norope = no RoPE + cache write.
# 8B model, int8 off, batch 1 and 32; f1 and base also with int8 auto at batch 1. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
M8=/tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
run() {  # variant mode batches tag
  timeout 60 $B/exl3-bench-$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/model-$1-$2-$4.json --markdown $R/model-$1-$2-$4.md > $R/model-$1-$2-$4.log 2>&1
  echo "model $1 $2 $4 rc $?" >> $S; grep -E 'decode batch' $R/model-$1-$2-$4.log | sed "s/^/  $1 $2 /" >> $S
}
for round in a b; do
  for v in base f0 f1 nonorm noout nomerge norope; do run $v off 1,32 $round; done
  for v in base f1; do run $v auto 1 $round; done
done
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
