#!/usr/bin/env bash
# Session 25, run 3: run 2 (H100) found lean2 (two product chains in one-group int8 kernels) 3.5-4%
# faster on 4096x28672 and 28672x8192 at one row, but 8192x28672, which the planner gives
# two-block stages, 2.5% slower than main with every lean variant (those instances spill 8-24 bytes
# at their 64-register bound). lean2s1 (branch s25-lean2-s1): lean2 without two-block stages
# (kInt8WideStageRows 0: 8192x28672 takes one-block stages of the same grid). Int8 linears at 1-2
# rows (three rounds), the 8B decode with int8 auto and off and the 70B with auto (two rounds), the
# int8 GPU test built as lean2s1. On an H200 then every target's figure with lean2's binaries.
# Bundle: exl3-bench (main), exl3-bench-{lean2,lean2s1}, exl3_gemv_int8_gpu_test-lean2s1,
# exl3-launch, exl3-coordinator, exl3-worker (lean2).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
M8=/tmp/m8; M70=/tmp/m70
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
cp $B/exl3-bench $B/exl3-bench-kept
for round in 1 2 3; do
  for v in kept lean2 lean2s1; do
    timeout 60 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --shapes 8192x28672,28672x8192,8192x10240,8192x8192,4096x28672,14336x4096 \
      --rows 1,2 --int8 --no-check --linear-bits 0 --markdown $R/gemv-i8-$v-$round.md > $R/gemv-i8-$v-$round.log 2>&1
    echo "gemv int8 $v $round: $(grep -E 'linear-int8' $R/gemv-i8-$v-$round.md | awk -F'|' '{print $4 $7 ":" $8}' | tr -s ' ' | tr '\n' ' ')" >> $S
    (( round == 3 )) && continue
    timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 \
      --batch 1,2,4,8 --decode-steps 64 --int8-activations auto > $R/model-auto-$v-$round.log 2>&1
    echo "8b auto $v $round: $(grep -E 'decode batch' $R/model-auto-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
    timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 \
      --batch 1,4,16,32,64 --decode-steps 32 --int8-activations off > $R/model-off-$v-$round.log 2>&1
    echo "8b off $v $round: $(grep -E 'decode batch' $R/model-off-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
echo "8b done at $SECONDS s" >> $S
$B/exl3-bench make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $? at $SECONDS s" >> $S
for round in 1 2; do
  for v in kept lean2 lean2s1; do
    timeout 60 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 \
      --batch 1,4 --decode-steps 16 --int8-activations auto > $R/model-70b-$v-$round.log 2>&1
    echo "70b auto $v $round: $(grep -E 'decode batch' $R/model-70b-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
rm -rf $M70
echo "timings done at $SECONDS s" >> $S
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
timeout 150 $B/exl3_gemv_int8_gpu_test-lean2s1 > $R/exl3_gemv_int8_gpu_test-lean2s1.log 2>&1
echo "exl3_gemv_int8_gpu_test-lean2s1 rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/exl3_gemv_int8_gpu_test-lean2s1.log | tr '\n' ' ')" >> $S
grep -h -B2 -A6 "Failure" $R/*-lean2s1.log | head -40 >> $S
echo "done at $SECONDS s" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  cp $B/exl3-bench-lean2 $B/exl3-bench
  OUT=$OUT/targets; mkdir -p $OUT
  PART=targets bash bench/results/2026-12-05-s22/run1.sh > /dev/null 2>&1
  echo "targets (lean2) at $SECONDS s" >> $S; cat $OUT/summary.txt >> $S
fi
cat $S
