#!/usr/bin/env bash
# Session 6 on one H200: the GEMV planner's partial-product cost (exl3_gemv_plan.cpp), before and
# after in one run. Binaries built here for sm_90 and unpacked into /tmp/g/bin: exl3-bench (this
# commit), exl3-bench-before (the commit before), two GPU tests. Results in $OUT/results.tar.gz,
# one line per step in $OUT/summary.txt.
set -u
B=/tmp/g/bin; R=$OUT/r; S=$OUT/summary.txt; mkdir -p "$R"
for t in exl3_gemv_int8_gpu_test exl3_linear_gpu_test; do
  timeout 120 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/$t.log | tr '\n' ' ')" >> $S
done
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for i8 in off auto; do
  for bin in exl3-bench-before exl3-bench; do
    tag=model-8b-$i8-$bin
    timeout 120 $B/$bin model --model $M8 --backend cuda --prefill 2048 --prefill-repeats 1 --batch 1,4,8,16,32 \
      --decode-steps 32 --int8-activations $i8 --json $R/$tag.json --markdown $R/$tag.md > $R/$tag.log 2>&1
    echo "$tag rc $? $(grep -E 'decode batch' $R/$tag.log | awk '{printf "b%s %s ", $5, $8}')" >> $S
  done
done
timeout 150 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv --launch-skip 4300 --launch-count 900 \
  $B/exl3-bench model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-steps 24 \
  --warmup 1 --int8-activations auto > $R/ncu-decode-b1.csv 2> $R/ncu-decode-b1.log; echo "ncu b1 rc $?" >> $S
tar -C $OUT -czf $OUT/results.tar.gz r && rm -rf "$R"
