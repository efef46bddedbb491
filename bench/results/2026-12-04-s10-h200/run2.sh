#!/usr/bin/env bash
# Session 10 on one H200, second run: the variants of run1 in the 8B model's decode (int8 auto:
# the int8 GEMV at batch 1-2; int8 off at batch 1 for base as the fp16 reference), two rounds.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
M8=/tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
run() {  # variant mode batches tag
  timeout 90 $B/exl3-bench-$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/model-$1-$2-$4.json --markdown $R/model-$1-$2-$4.md > $R/model-$1-$2-$4.log 2>&1
  echo "model $1 $2 $4 rc $?" >> $S; grep -E 'decode batch' $R/model-$1-$2-$4.log | sed "s/^/  $1 $2 /" >> $S
}
for round in a b; do
  for v in ${VARIANTS:-base fma2 fma3 chain2 lb5}; do run $v auto 1,2 $round; done
done
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
