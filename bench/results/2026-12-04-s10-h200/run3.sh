#!/usr/bin/env bash
# Session 10 on one H200, third run: what the int8 GEMV's prologue costs, by ablation (timing
# only, wrong results): nostage = no RMSNorm and no staging of x (q and scales left as found),
# noload = the staging's transform and quantization on constants instead of x's loads. The linear
# at 1-2 rows and the 8B decode (int8 auto, batch 1-2), two rounds, against base.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
V="base nostage noload"
gemv() {  # variant round
  timeout 100 $B/exl3-bench-$1 gemv --bits 4 --codebooks mul1 --int8 --rows 1,2 \
    --shapes 8192x28672,28672x8192,4096x28672,14336x4096,4096x6144,4096x4096 \
    --json $R/gemv-$1-$2.json --markdown $R/gemv-$1-$2.md > $R/gemv-$1-$2.log 2>&1
  echo "gemv $1 $2 rc $?" >> $S
  grep -E '^\| linear-int8 ' $R/gemv-$1-$2.md | awk -F'|' -v v=$1 '{printf "  %s %s K%s r%s %s Gw/ms\n",v,$3,$4,$6,$9}' >> $S
}
M8=/tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
run() {  # variant mode batches tag
  timeout 90 $B/exl3-bench-$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/model-$1-$2-$4.json --markdown $R/model-$1-$2-$4.md > $R/model-$1-$2-$4.log 2>&1
  echo "model $1 $2 $4 rc $?" >> $S; grep -E 'decode batch' $R/model-$1-$2-$4.log | sed "s/^/  $1 $2 /" >> $S
}
for round in a b; do for v in $V; do gemv $v $round; run $v auto 1,2 $round; done; done
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
