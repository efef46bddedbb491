#!/usr/bin/env bash
# Session 9 on one H200, first run (tree 13469c1): one batch-32 decode step kernel by kernel; the
# 4 GEMV launches and the 4 output passes of one layer at batch 32 with Nsight Compute's full set
# (stall reasons per SASS line). 8B shape, int8 off. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
NCU="/usr/local/cuda/bin/ncu --clock-control none"
ARGS="model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 32 --warmup 0 --int8-activations off"
timeout 200 $NCU --metrics gpu__time_duration.sum --csv $B/exl3-bench $ARGS --decode-steps 2 \
  > $R/ncu-step32.csv 2> $R/ncu-step32.log; echo "ncu step32 rc $?" >> $S
timeout 200 $NCU --set full --kernel-name regex:'exl3_gemv_kernel|gemv_output_kernel' --launch-skip 394 --launch-count 10 \
  -o $R/gemv32 $B/exl3-bench $ARGS --decode-steps 4 > $R/ncu-gemv32.log 2>&1; echo "ncu gemv32 rc $?" >> $S
$NCU -i $R/gemv32.ncu-rep --page details --csv > $R/gemv32-details.csv 2>&1
$NCU -i $R/gemv32.ncu-rep --page source --csv --print-source sass > $R/gemv32-sass.csv 2>&1; echo "sass rc $?" >> $S
rm -f $R/gemv32.ncu-rep
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
