#!/usr/bin/env bash
# Session 7 on one H200, first run (diagnosis, before any change): the few-rows EXL3 matmul alone
# and as a whole int8 linear at K=2..8 on the 70B and 8B matrices at 1 row, then Nsight Compute's
# full section set on one launch of the int8 kernel (K=4, 1 row, 8192x28672 and 28672x8192) and of
# the fp16 kernel at 32 rows (4096x28672, the 8B gate/up), for stall reasons and pipe use.
# Binaries built here for sm_90 and unpacked into /tmp/g/bin. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt
timeout 150 $B/exl3-bench gemv --bits 2,3,4,5,6,8 --codebooks mul1 --shapes 8192x28672,28672x8192,4096x28672,14336x4096,4096x6144,4096x4096 \
  --rows 1 --int8 --json $OUT/gemv-base.json --markdown $OUT/gemv-base.md > $OUT/gemv-base.log 2>&1
echo "gemv rc $?" >> $S
NCU=/usr/local/cuda/bin/ncu; [[ -x $NCU ]] || NCU=$(ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu at $NCU" >> $S
for shape in 8192x28672 28672x8192; do
  timeout 120 $NCU --clock-control none --set full -k regex:exl3_gemv_int8_kernel --launch-skip 60 --launch-count 1 \
    -o $OUT/ncu-int8-$shape $B/exl3-bench gemv --bits 4 --codebooks mul1 --shapes $shape --rows 1 --int8 --no-check \
    --iters 50 --repeats 1 > $OUT/ncu-int8-$shape.log 2>&1
  echo "ncu int8 $shape rc $?" >> $S
done
timeout 120 $NCU --clock-control none --set full -k regex:exl3_gemv_kernel --launch-skip 60 --launch-count 1 \
  -o $OUT/ncu-fp16-m32 $B/exl3-bench gemv --bits 4 --codebooks mul1 --shapes 4096x28672 --rows 32 --no-check \
  --iters 50 --repeats 1 > $OUT/ncu-fp16-m32.log 2>&1
echo "ncu fp16 m32 rc $?" >> $S
for f in $OUT/ncu-*.ncu-rep; do
  $NCU --import $f --page details --csv > ${f%.ncu-rep}-details.csv 2>/dev/null
  $NCU --import $f --page raw --csv > ${f%.ncu-rep}-raw.csv 2>/dev/null
done
tar -C $OUT -cJf $OUT/ncu.tar.xz $(cd $OUT && ls ncu-*) && (cd $OUT && rm -f ncu-*)
grep -E '^\| (linear-int8|gemm) ' $OUT/gemv-base.md | awk -F'|' '{printf "%s %s K%s r%s %s Gw/ms\n",$2,$3,$4,$6,$9}' >> $S
cat $S
