#!/usr/bin/env bash
# Session 29, run 2 (for an H200, whose figures in the README's target table date from sessions
# 10-12): targets 1-3 for one build, exl3-bench-$V (V=main unless set), in the commands of session
# 22's target part: the linears at 1 row, K = 2..8 (70B matrices, int8 and fp16 activations);
# the 8B decode with int8 auto (batch 1, 4, 8) and off (1-64) in two rounds; the 70B at batch 1
# and 32 (auto). Bundle: run 1's.
set -u
. bench/device_run.sh
V=${V:-main}
device_begin
echo "variant $V" >> $S
timeout 150 $B/exl3-bench-$V gemv --codebooks mul1 --bits 2,3,4,5,6,7,8 --rows 1 --no-check --linear-bits 0 \
  --int8 --json $R/gemv.json --markdown $R/gemv.md > $R/gemv.log 2>&1; echo "gemv rc $? at $SECONDS s" >> $S
grep -E "linear-int8|linear-f16" $R/gemv.md | head -60 >> $S
device_model 8b
for r in 1 2; do
  for i8 in auto off; do
    batches=1,4,8; [[ $i8 == off ]] && batches=1,4,16,32,64
    log=$R/model-8b-$i8-$r.log
    timeout 120 $B/exl3-bench-$V model --model /tmp/m8b --backend cuda --prefill 128 --prefill-repeats 1 --batch $batches \
      --decode-steps 32 --int8-activations $i8 --json $R/model-8b-$i8-$r.json --markdown $R/model-8b-$i8-$r.md > $log 2>&1
    echo "model 8b $i8 r$r rc $? at $SECONDS s" >> $S; grep -E '^\| [0-9]+ \| [0-9]+ \|' $R/model-8b-$i8-$r.md | sed "s/^/  $i8 /" >> $S
  done
done
device_model 70b
for r in 1 2; do
  log=$R/model-70b-auto-$r.log
  timeout 150 $B/exl3-bench-$V model --model /tmp/m70b --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,32 \
    --decode-steps 16 --int8-activations auto --json $R/model-70b-auto-$r.json --markdown $R/model-70b-auto-$r.md > $log 2>&1
  echo "model 70b auto r$r rc $? at $SECONDS s" >> $S; grep -E '^\| [0-9]+ \| [0-9]+ \|' $R/model-70b-auto-$r.md | sed "s/^/  auto /" >> $S
done
device_end
