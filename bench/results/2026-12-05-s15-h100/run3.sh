#!/usr/bin/env bash
# Session 15, third run: where a batch-1 decode step goes (8B, int8 auto, s8k4's tree), every
# kernel's time under Nsight Compute with the card's own clocks (step graphs off, so each launch
# is its own). Run 2's attempt profiled the first 4000 launches, all of them the loading and the
# two 128-token prefills (3,667 launches); this one skips those. Read it with
# bench/ncu_step_breakdown.py r/ncu-decode-b1.csv 3. Then 8-tile stages in 2 slots at K = 5 and 6
# too (exl3-bench-s8k6; s8k4 keeps 4-tile stages there): the fp16 linear at K = 5, 6 (the 6-bit
# head with int8 off) and the 8B with int8 off. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader >> $S
M8=/tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
timeout 110 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 3600 \
  --launch-count 1800 $B/exl3-bench-s8k4 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 \
  --decode-steps 3 --warmup 1 --step-graphs off --int8-activations auto > $R/ncu-decode-b1.csv 2> $R/ncu-decode-b1.log
echo "ncu b1 rc $? $(wc -l < $R/ncu-decode-b1.csv) lines" >> $S
for r in 1 2; do for v in exl3-bench-s8k4 exl3-bench-s8k6; do
  timeout 100 $B/$v gemv --bits 5,6 --codebooks mul1 --no-check --rows 1,8,32 \
    --shapes 4096x4096,4096x28672,4096x128256 --json $R/gemv-$v-$r.json --markdown $R/gemv-$v-$r.md > $R/gemv-$v-$r.log 2>&1
  echo "gemv $v $r rc $?" >> $S
  grep -E '^\| linear-f16 ' $R/gemv-$v-$r.md | awk -F'|' -v v=$v '{printf "  %s %s K%s r%s %s us\n",v,$3,$4,$6,$7}' >> $S
  timeout 100 $B/$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,16 --decode-steps 16 \
    --int8-activations off --json $R/ab-$v-$r.json > $R/ab-$v-$r.log 2>&1
  echo "ab $v $r rc $?" >> $S; grep -E 'decode batch' $R/ab-$v-$r.log | sed "s/^/  $v r$r /" >> $S
done; done
rm -rf $M8
xz -9 $R/ncu-decode-b1.csv; cp $S $R/
tar -C $OUT -cf $OUT/results.tar r && rm -rf $R
cat $S
