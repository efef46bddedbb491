#!/usr/bin/env bash
# Session 18, run 6: after run 5 (the norm hand-off at one row lost, the input hand-off at one row
# recovered part of that), w1i: two-block stages take a staged input and only the gated product's
# input hand-off is taken from one row (kGemvInputHandoffMinRows 1, the int8 norm hand-off from 2
# as before). Against base (HEAD 733599c): backend ops test of w1i; 8B int8 auto batch 1-4, four
# interleaved rounds; 70B int8 auto batch 1, two rounds.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
timeout 150 $B/backend_ops_gpu_test > $R/backend_ops_gpu_test.log 2>&1
echo "backend_ops_gpu_test rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/backend_ops_gpu_test.log | tr '\n' ' ')" >> $S
$B/exl3-bench-base make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for round in 1 2 3 4; do
  for v in base w1i; do
    timeout 60 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2,3,4 \
      --decode-steps 64 --int8-activations auto > $R/8b-$v-$round.log 2>&1
    echo "8b $v round $round: $(grep -E 'decode batch' $R/8b-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
rm -rf /tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-70b --out /tmp/m70 > $R/make-70b.log 2>&1
for round in 1 2; do
  for v in base w1i; do
    timeout 90 $B/exl3-bench-$v model --model /tmp/m70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 \
      --decode-steps 32 --int8-activations auto > $R/70b-$v-$round.log 2>&1
    echo "70b $v round $round: $(grep -E 'decode batch' $R/70b-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
