#!/usr/bin/env bash
# Session 18, run 3: every target's figure for the tree as it stands (733599c), 8B part, on one
# H200 (the issue states its targets there; sessions 14-17 ran on H100s). Target 1: the int8 and
# fp16 MUL1 linear at 1-8 rows, K = 2..8, the 70B matrices; 2/3/5: exl3-bench model, 8B, int8
# off (prefill 128/2048, batch 1-64) and auto (batch 1-8); 6: serve with one client against model
# at batch 1 at the same context (128 + 512), off and auto. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export PATH=$B:$PATH
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
timeout 150 $B/exl3-bench gemv --codebooks mul1 --bits 2,3,4,5,6,7,8 --rows 1,2,4,8 --no-check --linear-bits 0 \
  --int8 --json $R/gemv.json --markdown $R/gemv.md > $R/gemv.log 2>&1; echo "gemv rc $? at $SECONDS s" >> $S
grep -E "linear-int8|linear-f16" $R/gemv.md | grep -E "\| 1 \|" | head -30 >> $S
timeout 120 $B/exl3-bench model --model $M8 --backend cuda --prefill 128,2048 --prefill-repeats 2 --batch 1,4,8,16,32,64 \
  --decode-steps 32 --int8-activations off --json $R/model-8b-off.json --markdown $R/model-8b-off.md > $R/model-8b-off.log 2>&1
echo "model 8b off rc $? at $SECONDS s" >> $S; grep -E 'decode batch|prefill ' $R/model-8b-off.log | sed "s/^/  off /" >> $S
timeout 60 $B/exl3-bench model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2,4,8 \
  --decode-steps 32 --int8-activations auto --json $R/model-8b-auto.json --markdown $R/model-8b-auto.md > $R/model-8b-auto.log 2>&1
echo "model 8b auto rc $? at $SECONDS s" >> $S; grep -E 'decode batch' $R/model-8b-auto.log | sed "s/^/  auto /" >> $S
for i8 in off auto; do
  timeout 60 $B/exl3-bench model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-prompt 128 \
    --decode-steps 512 --warmup 1 --int8-activations $i8 --json $R/model-8b-ctx-$i8.json --markdown $R/model-8b-ctx-$i8.md \
    > $R/model-8b-ctx-$i8.log 2>&1
  echo "model 8b ctx $i8 rc $?" >> $S; grep -E 'decode batch' $R/model-8b-ctx-$i8.log | sed "s/^/  ctx $i8 /" >> $S
  timeout 120 $B/exl3-bench serve --launch "--model $M8 --gpus 0 --split 100 --max-seq-len 4096 --int8-activations $i8" \
    --clients 1 --max-new-tokens 512 --json $R/serve-8b-$i8.json --markdown $R/serve-8b-$i8.md > $R/serve-8b-$i8.log 2>&1
  echo "serve 8b $i8 rc $? at $SECONDS s" >> $S; tail -1 $R/serve-8b-$i8.md | sed "s/^/  $i8 /" >> $S
done
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
