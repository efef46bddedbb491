#!/usr/bin/env bash
# Session 27, run 8: lu, the output passes reading the partial products as their last use
# (ld.global.lu: stored under evict-last since run 7, their lines can go once read; branch
# s27-ldlu), against main 340661c (with the L2 policies): the 8B decode at batch 1, 4, 32 with int8
# auto, two rounds; then run 5's batch-32 profile again on main (Nsight Compute, every launch,
# the last 3 of 4 steps). Bundle: exl3-bench-main (340661c), exl3-bench-lu.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
M8=/tmp/m8
[[ -d $M8 ]] || $B/exl3-bench-main make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b at $SECONDS s" >> $S
for r in 1 2; do for v in main lu; do
  timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,32 \
    --decode-steps 48 --int8-activations auto > $R/m8-$v-$r.log 2>&1
  echo "8b auto $v r$r rc $?: $(grep -E 'decode batch' $R/m8-$v-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done
cp $S $R/; tar -C $OUT -cJf $OUT/results.tar.xz r
timeout 100 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 20000 \
  $B/exl3-bench-main model --model $M8 --backend cuda --prefill 16 --prefill-repeats 1 --batch 32 --decode-steps 4 \
  --warmup 1 --step-graphs off --int8-activations auto > $R/ncu-decode-b32.csv 2> $R/ncu-decode-b32.log
echo "ncu rc $? $(wc -l < $R/ncu-decode-b32.csv) lines at $SECONDS s" >> $S
python3 bench/ncu_step_breakdown.py $R/ncu-decode-b32.csv 3 >> $S 2>&1
xz -9 $R/*.csv 2>/dev/null
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
