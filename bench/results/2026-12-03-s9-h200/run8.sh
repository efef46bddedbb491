#!/usr/bin/env bash
# Session 9 on one H200, eighth run: n2 = the final tree (d2b3216, the RMSNorm fused into the
# matmul for 1-2 rows); n4 = the same for 1-4 rows. 8B model at batch 1-4 (int8 off and auto), two
# rounds. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
M8=/tmp/m8
$B/exl3-bench-n2 make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
run() {  # variant mode batches tag
  timeout 60 $B/exl3-bench-$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/model-$1-$2-$4.json --markdown $R/model-$1-$2-$4.md > $R/model-$1-$2-$4.log 2>&1
  echo "model $1 $2 $4 rc $?" >> $S; grep -E 'decode batch' $R/model-$1-$2-$4.log | sed "s/^/  $1 $2 /" >> $S
}
for round in a b; do
  for v in n2 n4; do run $v off 1,2,3,4 $round; run $v auto 1,2,3,4 $round; done
done
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
