#!/usr/bin/env bash
# Session 7 on one H200, sixth run: v5 (717a1f3) against v7 (v5 with the fp16 few-rows kernel's
# planner also counting all 4 resident blocks as an SM's saturating load, as the int8 kernel's
# does): the fp16 GEMV and whole linear on the 8B matrices, the 8B model with int8 off and auto.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
for v in v5 v7; do
  timeout 100 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --shapes 4096x28672,14336x4096,4096x6144,4096x4096,8192x28672 \
    --rows 1,4,16 --linear-bits 4 --json $R/gemv16-$v.json --markdown $R/gemv16-$v.md > $R/gemv16-$v.log 2>&1
  echo "gemv $v rc $?" >> $S
  grep -E '^\| (gemm|linear) ' $R/gemv16-$v.md | awk -v v=$v -F'|' '{printf "  %s %s %s K%s r%s %s us %s Gw/ms\n",v,$2,$3,$4,$6,$7,$9}' >> $S
done
M8=/tmp/m8
$B/exl3-bench-v5 make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for v in v5 v7; do
  for i8 in off auto; do
    timeout 120 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --batch 1,4,16,32 --decode-steps 32 \
      --int8-activations $i8 --json $R/model-8b-$i8-$v.json --markdown $R/model-8b-$i8-$v.md > $R/model-8b-$i8-$v.log 2>&1
    echo "model 8b $i8 $v rc $?" >> $S; grep -E 'decode batch' $R/model-8b-$i8-$v.log | sed "s/^/  $v $i8 /" >> $S
  done
done
cp $S $R/
tar -C $OUT -czf $OUT/results.tar.gz r && rm -rf $R
cat $S
