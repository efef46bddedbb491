#!/usr/bin/env bash
# Session 25, run 2: the one-row int8 matmul. Run 1 (H100) found lean's 4.7% fewer instructions
# worth 2-3% of the 4096x28672 kernel but not of the 8192x28672 linear, and the stall samples
# waiting on the IMMA chain (16 dependent products a block). lean2 (branch s25-int8-lean, second
# commit): one-group kernels (K <= 5, one-block stages) keep two chains of 8, summed as integers
# (the same sums). lean2r4 (branch s25-lean2-r4): lean2 with 4 ring slots of 8 tiles at K <= 4 (3
# before; two-block stages keep 3). Three rounds of int8 linears at 1-2 rows, two of the 8B decode
# with int8 auto, the int8 GPU test built as lean2, Nsight Compute on lean2's one-row matmul. On
# an H200 then every target's figure with lean's binaries (session 22's run 1, PART=targets).
# Bundle: exl3-bench (main), exl3-bench-{lean,lean2,lean2r4}, exl3_gemv_int8_gpu_test-lean2,
# exl3-launch, exl3-coordinator, exl3-worker (lean).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
cp $B/exl3-bench $B/exl3-bench-kept
for round in 1 2 3; do
  for v in kept lean lean2 lean2r4; do
    timeout 60 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --shapes 8192x28672,28672x8192,4096x28672,14336x4096,4096x4096 \
      --rows 1,2 --int8 --no-check --linear-bits 0 --markdown $R/gemv-i8-$v-$round.md > $R/gemv-i8-$v-$round.log 2>&1
    echo "gemv int8 $v $round: $(grep -E 'linear-int8' $R/gemv-i8-$v-$round.md | awk -F'|' '{print $4 $7 ":" $8}' | tr -s ' ' | tr '\n' ' ')" >> $S
    (( round == 3 )) && continue
    timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 \
      --batch 1,2,4,8 --decode-steps 64 --int8-activations auto > $R/model-auto-$v-$round.log 2>&1
    echo "8b auto $v $round: $(grep -E 'decode batch' $R/model-auto-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
echo "timings done at $SECONDS s" >> $S
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
timeout 150 $B/exl3_gemv_int8_gpu_test-lean2 > $R/exl3_gemv_int8_gpu_test-lean2.log 2>&1
echo "exl3_gemv_int8_gpu_test-lean2 rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/exl3_gemv_int8_gpu_test-lean2.log | tr '\n' ' ')" >> $S
grep -h -B2 -A6 "Failure" $R/*-lean2.log | head -40 >> $S
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for v in lean2 lean2r4; do
  timeout 90 $NCU --clock-control none --set full --import-source no --kernel-name-base demangled -k "regex:exl3_gemv_int8_kernel" \
    --launch-skip 20 --launch-count 1 -o $R/ncu-int8-m1-$v $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --shapes 4096x28672 \
    --rows 1 --int8 --no-check --linear-bits 0 --iters 30 --repeats 1 > $R/ncu-int8-m1-$v.log 2>&1
  echo "ncu int8-m1 $v rc $? at $SECONDS s" >> $S
  $NCU --import $R/ncu-int8-m1-$v.ncu-rep --page details --csv > $R/ncu-int8-m1-$v-details.csv 2>&1
  $NCU --import $R/ncu-int8-m1-$v.ncu-rep --page source --csv --print-source sass > $R/ncu-int8-m1-$v-sass.csv 2>&1
  rm -f $R/ncu-int8-m1-$v.ncu-rep
done
echo "done at $SECONDS s" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  cp $B/exl3-bench-lean $B/exl3-bench
  OUT=$OUT/targets; mkdir -p $OUT
  PART=targets bash bench/results/2026-12-05-s22/run1.sh > /dev/null 2>&1
  echo "targets (lean) at $SECONDS s" >> $S; cat $OUT/summary.txt >> $S
fi
cat $S
