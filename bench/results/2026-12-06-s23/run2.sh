#!/usr/bin/env bash
# Session 23, run 2: where the 32-row matmuls spend their time. Nsight Compute (full set) on the
# whole MUL1 linear's matmul at 32 rows (4096x28672, K=4): the int8 kernel with warpgroup products
# (branch s23-wgmma-probe fcc3628) and the fp16 kernel; the int8 mma.sync kernel at 8 rows for
# reference. Bundle: exl3-bench (fcc3628).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt
NCU=/usr/local/cuda/bin/ncu; [[ -x $NCU ]] || NCU=$(ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader > $S
echo "ncu at $NCU" >> $S
prof() {  # name kernel-regex rows
  timeout 150 $NCU --clock-control none --set full --kernel-name-base demangled -k "regex:$2" --launch-skip 20 --launch-count 1 \
    -o $OUT/ncu-$1 $B/exl3-bench gemv --bits 4 --codebooks mul1 --shapes 4096x28672 --rows $3 --int8 --no-check \
    --linear-bits 0 --iters 20 --repeats 1 > $OUT/ncu-$1.log 2>&1
  echo "ncu $1 rc $? at $SECONDS s" >> $S
}
prof wgmma-m32 'exl3_gemv_int8_wgmma_kernel' 32
prof fp16-m32 'exl3_gemv_kernel<.int.4, .exl3::Codebook.2, .int.2, .bool.1>' 32
prof int8-m8 'exl3_gemv_int8_kernel' 8
for f in $OUT/ncu-*.ncu-rep; do
  $NCU --import $f --page details --csv > ${f%.ncu-rep}-details.csv 2>/dev/null
  $NCU --import $f --page raw --csv > ${f%.ncu-rep}-raw.csv 2>/dev/null
done
ls -la $OUT >> $S
cat $S
