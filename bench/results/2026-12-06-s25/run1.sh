#!/usr/bin/env bash
# Session 25, run 1: branch s25-int8-lean against main (exl3-bench-lean / exl3-bench). The lean
# ring moves one source pointer a stage (the other chunks at fixed offsets), the stage loop runs
# rounds whose stages all exist without bounds checks, and the int8 kernel keeps its rows' biases
# and store predicates in registers (its sums start from the bias). Int8 linears at 1-2 rows (target
# 1's shapes first), fp16 linears at 16/32 rows, the 8B decode off and auto, two rounds
# alternated; then the GPU tests that run the changed kernels, built from the branch, and Nsight
# Compute on the one-row int8 matmul of both.
# leanwide (branch s25-lean-wide): lean with session 24's two-block int8 stages wherever they take
# the one-block plan's grid (s24-wide-ties), in the int8 parts only.
# Bundle: exl3-bench (main), exl3-bench-lean, exl3-bench-leanwide, exl3_gemv_int8_gpu_test-lean,
# backend_ops_gpu_test-lean.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
cp $B/exl3-bench $B/exl3-bench-kept
for round in 1 2; do
  for v in kept lean leanwide; do
    timeout 60 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --shapes 8192x28672,28672x8192,4096x28672,14336x4096,4096x4096,4096x6144 \
      --rows 1,2 --int8 --no-check --linear-bits 0 --markdown $R/gemv-i8-$v-$round.md > $R/gemv-i8-$v-$round.log 2>&1
    echo "gemv int8 $v $round: $(grep -E 'linear-int8' $R/gemv-i8-$v-$round.md | awk -F'|' '{print $4 $7 ":" $8}' | tr -s ' ' | tr '\n' ' ')" >> $S
    grep -E 'linear-int8' $R/gemv-i8-$v-$round.md | grep -E '\| 1 \|' | head -2 | sed "s/^/  $v $round /" >> $S
    timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 \
      --batch 1,2,4,8 --decode-steps 64 --int8-activations auto > $R/model-auto-$v-$round.log 2>&1
    echo "8b auto $v $round: $(grep -E 'decode batch' $R/model-auto-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
    [[ $v == leanwide ]] && continue
    timeout 60 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --shapes 4096x28672,14336x4096,4096x6144,4096x4096 \
      --rows 16,32 --int8 --no-check --linear-bits 0 --markdown $R/gemv-f16-$v-$round.md > $R/gemv-f16-$v-$round.log 2>&1
    echo "gemv f16 $v $round: $(grep -E 'linear-f16' $R/gemv-f16-$v-$round.md | awk -F'|' '{print $4 $7 ":" $8}' | tr -s ' ' | tr '\n' ' ')" >> $S
    timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 \
      --batch 1,4,8,16,32,64 --decode-steps 32 --int8-activations off > $R/model-off-$v-$round.log 2>&1
    echo "8b off $v $round: $(grep -E 'decode batch' $R/model-off-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
echo "timings done at $SECONDS s" >> $S
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_gemv_int8_gpu_test backend_ops_gpu_test; do
  timeout 150 $B/$t-lean > $R/$t-lean.log 2>&1; echo "$t-lean rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t-lean.log | tr '\n' ' ')" >> $S
done
grep -h -B2 -A6 "Failure" $R/*-lean.log | head -40 >> $S
# Nsight Compute on the one-row int8 matmul (4096x28672, as session 24's run 1) for main and lean.
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for v in kept lean; do
  timeout 90 $NCU --clock-control none --set full --import-source no --kernel-name-base demangled -k "regex:exl3_gemv_int8_kernel" \
    --launch-skip 20 --launch-count 1 -o $R/ncu-int8-m1-$v $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --shapes 4096x28672 \
    --rows 1 --int8 --no-check --linear-bits 0 --iters 30 --repeats 1 > $R/ncu-int8-m1-$v.log 2>&1
  echo "ncu int8-m1 $v rc $? at $SECONDS s" >> $S
  $NCU --import $R/ncu-int8-m1-$v.ncu-rep --page details --csv > $R/ncu-int8-m1-$v-details.csv 2>&1
  $NCU --import $R/ncu-int8-m1-$v.ncu-rep --page source --csv --print-source sass > $R/ncu-int8-m1-$v-sass.csv 2>&1
  grep -E '"(Duration|Executed Ipc Active|Issue Slots Busy|Achieved Occupancy|Registers Per Thread|DRAM Throughput|Executed Instructions)"' \
    $R/ncu-int8-m1-$v-details.csv | cut -d, -f13-16 | sed "s/^/  $v /" >> $S
done
echo "done at $SECONDS s" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
