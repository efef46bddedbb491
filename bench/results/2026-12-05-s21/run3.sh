#!/usr/bin/env bash
# Session 21, run 3. Runs 1-2 (the branch's run8.sh, PART=1 and 2) found branch s20-token-splits
# (each token cuts its own context into the plan's split count) +25/+39/+47% with a 4,4 cache at
# batch 16/32/64 (2048-token prompts, int8 off), but 1-2% slower with F16 and 8-bit caches at
# batch 4-32 and 2.5 us slower in the op at batch 1. Main keeps each split's chunk (made for the
# graph's page bucket) and gives 4,4 the 4096-row target; here main with 16384 rows at 4,4 too
# (exl3-bench-q16kall: more, shorter splits for 4,4 without the branch's per-token cut) against
# main and the branch, 4,4 at 2048- and 512-token prompts, two rounds, and the op at 2048 keys.
# Bundle (session 21 prebuilt, build/s21-prep/bin): exl3-bench-main (main 91d46d5), exl3-bench
# (the branch, e05f279), exl3-bench-q16kall (main with QuantSource::split_target_rows 16384).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
cp $B/exl3-bench $B/exl3-bench-branch
$B/exl3-bench-main make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
m() {  # variant prompt cache-bits batches round
  local log=$R/p$2-k$3-$1-$5.log
  timeout 90 $B/exl3-bench-$1 model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $4 \
    --decode-prompt $2 --decode-steps 32 --int8-activations off --cache-bits $3 > $log 2>&1
  echo "8b p$2 off cache $3 $1 round $5: $(grep -E 'decode batch' $log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
}
for round in 1 2; do
  for v in main q16kall branch; do m $v 2048 4 1,4,16,32,64 $round; done
  for v in main q16kall branch; do m $v 512 4 1,4,16,32,64 $round; done
done
for v in main q16kall; do
  timeout 60 $B/exl3-bench-$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16,32,64 --context 2048 --timing graph \
    --cache-bits 4 --markdown $R/kernels-$v-k4.md > $R/kernels-$v-k4.log 2>&1
  echo "attention cache 4 ctx 2048 $v: $(grep -E '^\| attention' $R/kernels-$v-k4.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
