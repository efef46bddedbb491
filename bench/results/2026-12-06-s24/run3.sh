#!/usr/bin/env bash
# Session 24, run 3: the output pass with 8 partial-product loads in flight (4 before): at 32 rows
# the wide matmuls take 5 slices and one warp an output, so 4 at once paid two latencies (run 1:
# 13.6 us of the 58 us 4096x28672 linear). out8: kInFlight 8 and __launch_bounds__(256, 4) (64
# registers); out8r: kInFlight 8 alone (80 registers, 3 blocks an SM). Whole linears at 16/32 rows,
# the 8B decode (two rounds each), the backend op GPU tests built as out8, then Nsight Compute on
# the 32-row fp16 matmul (run 1's regex missed it).
# Then wide: two-block int8 stages wherever they take the one-block plan's grid (branch
# s24-wide-ties: 4096x28672 and 4096x4096 at 1-2 rows in the 8B), int8 linears at 1-2 rows and the
# 8B decode with int8 auto, two rounds.
# Bundle: exl3-bench (main), exl3-bench-out8, exl3-bench-out8r, exl3-bench-wide,
# backend_ops_gpu_test-out8.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
left() { (( SECONDS < 150 )) || { echo "skipped at $SECONDS s: $*" >> $S; false; }; }
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
cp $B/exl3-bench $B/exl3-bench-kept
for round in 1 2; do
  for v in kept out8 out8r; do
    left gemv && timeout 40 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --shapes 4096x28672,14336x4096,4096x6144,4096x4096 \
      --rows 16,32 --int8 --no-check --linear-bits 0 --markdown $R/gemv-$v-$round.md > $R/gemv-$v-$round.log 2>&1
    echo "gemv $v $round: $(grep -E 'linear-f16' $R/gemv-$v-$round.md | awk -F'|' '{print $4 $7 ":" $8}' | tr -s ' ' | tr '\n' ' ')" >> $S
    left model && timeout 40 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 \
      --batch 1,4,8,16,32,64 --decode-steps 32 --int8-activations off > $R/model-$v-$round.log 2>&1
    echo "8b off $v $round: $(grep -E 'decode batch' $R/model-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
for round in 1 2; do
  for v in kept wide; do
    left wide && timeout 40 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --shapes 4096x28672,4096x4096,4096x6144,14336x4096 \
      --rows 1,2 --int8 --no-check --linear-bits 0 --markdown $R/gemv-w-$v-$round.md > $R/gemv-w-$v-$round.log 2>&1
    echo "gemv int8 $v $round: $(grep -E 'linear-int8' $R/gemv-w-$v-$round.md | awk -F'|' '{print $4 $7 ":" $8}' | tr -s ' ' | tr '\n' ' ')" >> $S
    left wide && timeout 40 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 \
      --batch 1,2,4 --decode-steps 64 --int8-activations auto > $R/model-w-$v-$round.log 2>&1
    echo "8b auto $v $round: $(grep -E 'decode batch' $R/model-w-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
timeout 60 $B/backend_ops_gpu_test-out8 > $R/backend_ops-out8.log 2>&1
echo "backend_ops-out8 rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/backend_ops-out8.log | tr '\n' ' ') at $SECONDS s" >> $S
grep -B2 -A6 "Failure" $R/backend_ops-out8.log | head -30 >> $S
timeout 40 /usr/local/cuda/bin/ncu --clock-control none --set full --import-source no --kernel-name-base demangled -k "regex:exl3_gemv_kernel<.int.4, .exl3::Codebook.2, .int.2, .bool.1>" \
  --launch-skip 20 --launch-count 1 -o $R/ncu-fp16-m32 $B/exl3-bench gemv --bits 4 --codebooks mul1 --shapes 4096x28672 \
  --rows 32 --int8 --no-check --linear-bits 0 --iters 30 --repeats 1 > $R/ncu-fp16-m32.log 2>&1
echo "ncu fp16-m32 rc $? at $SECONDS s" >> $S
/usr/local/cuda/bin/ncu --import $R/ncu-fp16-m32.ncu-rep --page details --csv > $R/ncu-fp16-m32-details.csv 2>&1
/usr/local/cuda/bin/ncu --import $R/ncu-fp16-m32.ncu-rep --page source --csv --print-source sass > $R/ncu-fp16-m32-sass.csv 2>&1
echo "done at $SECONDS s" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
