#!/usr/bin/env bash
# Session 16, third run: where the targets stand with this session's tree (01d729d), 8B and 70B
# decode, int8 auto and off, two rounds of 64 steps at a 32-token prompt (exl3-bench's default).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
m() {  # model mode batches tag steps
  [ $SECONDS -lt 520 ] || { echo "$4 skipped (time)" >> $S; return; }
  timeout 150 $B/exl3-bench model --model $1 --backend cuda --prefill 128,2048 --prefill-repeats 1 --batch $3 \
    --decode-steps $5 --int8-activations $2 --json $R/$4.json --markdown $R/$4.md > $R/$4.log 2>&1
  echo "$4 rc $?" >> $S; grep -E 'decode batch|prefill|roofline|copy' $R/$4.log | sed "s/^/  $4 /" >> $S
}
M8=/tmp/m8; M70=/tmp/m70
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
for r in 1 2; do m $M8 auto 1,4,8,16,32 8b-auto-r$r 64; m $M8 off 1,32 8b-off-r$r 64; done
rm -rf $M8
$B/exl3-bench make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $? at $SECONDS s" >> $S
for r in 1 2; do m $M70 auto 1,32 70b-auto-r$r 16; done
m $M70 off 1 70b-off 16
rm -rf $M70
echo "done at $SECONDS s" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
