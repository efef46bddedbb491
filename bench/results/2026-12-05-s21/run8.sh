#!/usr/bin/env bash
# Session 21, run 8: every target's figure for the tree as it stands (HEAD after 2ef4221), as
# session 18's runs 3-4 (the same commands): target 1, the int8 and fp16 MUL1 linear at 1-8 rows,
# K = 2..8, the 70B matrices; 2/3/5, exl3-bench model, 8B int8 off (prefill 128/2048, batch 1-64)
# and auto (batch 1-8), 70B prefill 2048 and batch 1/4/32 off and auto; 6, serve with one client
# against model at batch 1 at the same context (128 + 512), off and auto. Then run 7's variants
# (quantized caches with at least 2 or 4 blocks a split) in one round. PART=variants runs only
# those (with the 8B model they need).
# Bundle: exl3-bench, exl3-bench-mk2, exl3-bench-mk4, exl3-launch, exl3-coordinator, exl3-worker.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export PATH=$B:$PATH
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
if [[ ${PART:-all} == all ]]; then
timeout 150 $B/exl3-bench gemv --codebooks mul1 --bits 2,3,4,5,6,7,8 --rows 1,2,4,8 --no-check --linear-bits 0 \
  --int8 --json $R/gemv.json --markdown $R/gemv.md > $R/gemv.log 2>&1; echo "gemv rc $? at $SECONDS s" >> $S
grep -E "linear-int8|linear-f16" $R/gemv.md | grep -E "\| 1 \|" | head -30 >> $S
timeout 120 $B/exl3-bench model --model $M8 --backend cuda --prefill 128,2048 --prefill-repeats 2 --batch 1,4,8,16,32,64 \
  --decode-steps 32 --int8-activations off --json $R/model-8b-off.json --markdown $R/model-8b-off.md > $R/model-8b-off.log 2>&1
echo "model 8b off rc $? at $SECONDS s" >> $S; grep -E 'decode batch|prefill |roofline' $R/model-8b-off.log | sed "s/^/  off /" >> $S
timeout 60 $B/exl3-bench model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2,4,8 \
  --decode-steps 32 --int8-activations auto --json $R/model-8b-auto.json --markdown $R/model-8b-auto.md > $R/model-8b-auto.log 2>&1
echo "model 8b auto rc $? at $SECONDS s" >> $S; grep -E 'decode batch|roofline' $R/model-8b-auto.log | sed "s/^/  auto /" >> $S
for i8 in off auto; do
  timeout 60 $B/exl3-bench model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-prompt 128 \
    --decode-steps 512 --warmup 1 --int8-activations $i8 --json $R/model-8b-ctx-$i8.json --markdown $R/model-8b-ctx-$i8.md \
    > $R/model-8b-ctx-$i8.log 2>&1
  echo "model 8b ctx $i8 rc $?" >> $S; grep -E 'decode batch' $R/model-8b-ctx-$i8.log | sed "s/^/  ctx $i8 /" >> $S
  timeout 120 $B/exl3-bench serve --launch "--model $M8 --gpus 0 --max-seq-len 4096 --int8-activations $i8" \
    --clients 1 --max-new-tokens 512 --json $R/serve-8b-$i8.json --markdown $R/serve-8b-$i8.md > $R/serve-8b-$i8.log 2>&1
  echo "serve 8b $i8 rc $? at $SECONDS s" >> $S; tail -1 $R/serve-8b-$i8.md | sed "s/^/  $i8 /" >> $S
done
M70=/tmp/m70
$B/exl3-bench make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $? at $SECONDS s" >> $S
for i8 in off auto; do
  prefill="--prefill 2048 --prefill-repeats 1"; [[ $i8 == auto ]] && prefill="--prefill 128 --prefill-repeats 1"
  timeout 200 $B/exl3-bench model --model $M70 --backend cuda $prefill --batch 1,4,32 \
    --decode-steps 16 --int8-activations $i8 --json $R/model-70b-$i8.json --markdown $R/model-70b-$i8.md \
    > $R/model-70b-$i8.log 2>&1
  echo "model 70b $i8 rc $? at $SECONDS s" >> $S; grep -E 'decode batch|prefill |roofline' $R/model-70b-$i8.log | sed "s/^/  $i8 /" >> $S
done
rm -rf $M70
fi
cp $B/exl3-bench $B/exl3-bench-kept
for bits in 4 8; do
  for v in kept mk2 mk4; do
    timeout 60 $B/exl3-bench-$v kernels --model $M8 --backend cuda --rows 1,4,16 --context 2048 --timing graph \
      --cache-bits $bits --markdown $R/kernels-$v-k$bits.md > $R/kernels-$v-k$bits.log 2>&1
    echo "attention cache $bits ctx 2048 $v: $(grep -E '^\| attention' $R/kernels-$v-k$bits.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
  done
  for p in 2048 512; do
    for v in kept mk2 mk4; do
      log=$R/p$p-k$bits-$v.log
      timeout 90 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16 \
        --decode-prompt $p --decode-steps 32 --int8-activations off --cache-bits $bits > $log 2>&1
      echo "8b p$p off cache $bits $v: $(grep -E 'decode batch' $log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
    done
  done
done
echo "done at $SECONDS s" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
