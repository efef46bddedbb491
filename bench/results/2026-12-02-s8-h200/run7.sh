#!/usr/bin/env bash
# Session 8 on one H200, seventh run: the final tree through the API and one batch-1 step by
# kernel. exl3-bench serve with an exl3-launch of the 8B (int8 off: 1 and 32 clients; auto: 1
# client, 512 new tokens) against exl3-bench model at batch 1 in the same run; Nsight Compute
# durations of the kernels of 8B decode steps at batch 1 (int8 auto). Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for i8 in off auto; do
  timeout 60 $B/exl3-bench model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-steps 64 \
    --int8-activations $i8 --json $R/model-8b-$i8.json --markdown $R/model-8b-$i8.md > $R/model-8b-$i8.log 2>&1
  echo "model 8b $i8 rc $?" >> $S; grep -E 'decode batch' $R/model-8b-$i8.log | sed "s/^/  $i8 /" >> $S
done
for cfg in "off 1,32" "auto 1"; do
  set -- $cfg; i8=$1; clients=$2
  timeout 150 $B/exl3-bench serve --launch "--model $M8 --gpus 0 --split 100 --max-seq-len 4096 --int8-activations $i8" \
    --clients $clients --max-new-tokens 512 --json $R/serve-8b-$i8.json --markdown $R/serve-8b-$i8.md > $R/serve-8b-$i8.log 2>&1
  echo "serve 8b $i8 rc $?" >> $S; grep -iE 'clients|tokens/s' $R/serve-8b-$i8.md | head -8 | sed "s/^/  $i8 /" >> $S
done
cp $S $R/; tar -C $OUT -cJf $OUT/results.tar.xz r
timeout 150 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv \
  $B/exl3-bench model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-steps 3 \
  --warmup 0 --int8-activations auto > $R/ncu-step1-final.csv 2> $R/ncu-step1-final.log; echo "ncu step1 rc $?" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
