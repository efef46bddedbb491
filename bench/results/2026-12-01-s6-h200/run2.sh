#!/usr/bin/env bash
# Session 6, second run on one H200: the sampler's ranges kernel (kernels/cuda/sample.cu), before
# and after in one run. /tmp/g/bin: exl3-bench (this commit), exl3-bench-before (the commit
# before), three GPU tests. Results in $OUT/results2.tar.gz, one line per step in $OUT/summary2.txt.
set -u
B=/tmp/g/bin; R=$OUT/r2; S=$OUT/summary2.txt; mkdir -p "$R"
for t in sample_gpu_test backend_sample_gpu_test cuda_allocation_gpu_test; do
  timeout 120 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/$t.log | tr '\n' ' ')" >> $S
done
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for i8 in auto off; do
  for bin in exl3-bench-before exl3-bench; do
    tag=model-8b-$i8-$bin
    timeout 100 $B/$bin model --model $M8 --backend cuda --prefill 2048 --prefill-repeats 1 --batch 1,4,16,32 \
      --decode-steps 64 --int8-activations $i8 --json $R/$tag.json --markdown $R/$tag.md > $R/$tag.log 2>&1
    echo "$tag rc $? $(grep -E 'decode batch' $R/$tag.log | awk '{printf "b%s %s ", $5, $8}')" >> $S
  done
done
tar -C $OUT -czf $OUT/results2.tar.gz r2 && rm -rf "$R"
