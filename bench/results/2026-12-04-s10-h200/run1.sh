#!/usr/bin/env bash
# Session 10 on one H200, first run. The int8 GEMV (target 1) against four variants, each with its
# own int8 GPU test: fma2 / fma3 = two or three of the lane's low-half states at K=4 taken by an
# IMAD (v - hi·65536) instead of an ALU mask (the ALU pipe is the kernel's busiest), chain2 = fma2
# with a tile's two products in two independent chains of sums, lb5 = fma2 with launch bounds for
# 5 resident blocks (48 registers). The linear at 1 and 2 rows on the 70B/8B matrices, two rounds;
# then Nsight Compute's full set with source counters on one launch of base (8192x28672, K=4, 1 row).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $R/gpu.txt
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
V="base fma2 fma3 chain2 lb5"
for v in $V; do
  timeout 120 $B/int8test-$v > $R/int8test-$v.log 2>&1; echo "int8test $v rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/int8test-$v.log | tr '\n' ' ')" >> $S
done
gemv() {  # variant round
  timeout 100 $B/exl3-bench-$1 gemv --bits 4 --codebooks mul1 --int8 --rows 1,2 \
    --shapes 8192x28672,28672x8192,4096x28672,14336x4096,4096x6144,4096x4096 \
    --json $R/gemv-$1-$2.json --markdown $R/gemv-$1-$2.md > $R/gemv-$1-$2.log 2>&1
  echo "gemv $1 $2 rc $?" >> $S
  grep -E '^\| linear-int8 ' $R/gemv-$1-$2.md | awk -F'|' -v v=$1 '{printf "  %s %s K%s r%s %s Gw/ms\n",v,$3,$4,$6,$9}' >> $S
}
for round in a b; do for v in $V; do gemv $v $round; done; done
NCU=/usr/local/cuda/bin/ncu
timeout 150 $NCU --clock-control none --set full --import-source no -k regex:exl3_gemv_int8_kernel --launch-skip 60 --launch-count 1 \
  -o $R/ncu-base $B/exl3-bench-base gemv --bits 4 --codebooks mul1 --shapes 8192x28672 --rows 1 --int8 --no-check \
  --iters 50 --repeats 1 > $R/ncu-base.log 2>&1
echo "ncu base rc $?" >> $S
$NCU -i $R/ncu-base.ncu-rep --page source --csv --print-source sass > $R/ncu-base-sass.csv 2>/dev/null
$NCU -i $R/ncu-base.ncu-rep --page details --csv > $R/ncu-base-details.csv 2>/dev/null
rm -f $R/ncu-base.ncu-rep
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
