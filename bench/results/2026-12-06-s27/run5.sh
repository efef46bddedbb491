#!/usr/bin/env bash
# Session 27, run 5: where a batch-32 step of the 8B goes (target 3), Nsight Compute with step
# graphs off: every launch's time, int8 auto (fp16 past 8 rows), a 32-token decode prompt
# (the model bench's default) and 4 decode steps after 1 warm-up, every launch profiled (a first
# try skipping 1,100 launches still caught the prompts' prefill). bench/ncu_step_breakdown.py
# sums the last 3 full steps by kernel. Bundle: exl3-bench-main (main 9932ac0).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
M8=/tmp/m8
$B/exl3-bench-main make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
timeout 60 $B/exl3-bench-main model --model $M8 --backend cuda --prefill 16 --prefill-repeats 1 --batch 32 --decode-steps 32 \
  --int8-activations auto > $R/m8-b32.log 2>&1
echo "8b auto b32 (graphs on) rc $?: $(grep -E 'decode batch' $R/m8-b32.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
timeout 60 $B/exl3-bench-main model --model $M8 --backend cuda --prefill 16 --prefill-repeats 1 --batch 32 --decode-steps 32 \
  --step-graphs off --int8-activations auto > $R/m8-b32-nograph.log 2>&1
echo "8b auto b32 (graphs off) rc $?: $(grep -E 'decode batch' $R/m8-b32-nograph.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
NCU=/usr/local/cuda/bin/ncu
timeout 240 $NCU --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 20000 \
  $B/exl3-bench-main model --model $M8 --backend cuda --prefill 16 --prefill-repeats 1 --batch 32 --decode-steps 4 \
  --warmup 1 --step-graphs off --int8-activations auto > $R/ncu-decode-b32.csv 2> $R/ncu-decode-b32.log
echo "ncu rc $? $(wc -l < $R/ncu-decode-b32.csv) lines at $SECONDS s" >> $S
python3 bench/ncu_step_breakdown.py $R/ncu-decode-b32.csv 3 >> $S 2>&1
xz -9 $R/*.csv 2>/dev/null
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
