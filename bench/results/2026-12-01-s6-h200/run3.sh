#!/usr/bin/env bash
# Session 6, third run on one H200: RMSNorm threads per row (kernels/cuda/rms_norm.cu,
# kElementsPerThread 4 = before, 8, 16), kernel time and 8B decode in one run. /tmp/g/bin:
# exl3-bench-before, exl3-bench-e8, exl3-bench-e16 and the ops GPU tests (built with 16).
# Results in $OUT/results3.tar.gz, one line per step in $OUT/summary3.txt.
set -u
B=/tmp/g/bin; R=$OUT/r3; S=$OUT/summary3.txt; mkdir -p "$R"
for t in cuda_ops_gpu_test backend_ops_gpu_test; do
  timeout 120 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/$t.log | tr '\n' ' ')" >> $S
done
M8=/tmp/m8
$B/exl3-bench-before make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for bin in exl3-bench-before exl3-bench-e8 exl3-bench-e16; do
  timeout 60 $B/$bin kernels --model $M8 --backend cuda --rows 1 --timing graph --markdown $R/kernels-$bin.md \
    > $R/kernels-$bin.log 2>&1; echo "kernels $bin rc $? $(grep rms_norm $R/kernels-$bin.md | cut -d'|' -f5,6)" >> $S
done
for bin in exl3-bench-before exl3-bench-e8 exl3-bench-e16 exl3-bench-before; do
  tag=model-8b-$bin
  timeout 60 $B/$bin model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,32 \
    --decode-steps 64 --int8-activations auto --markdown $R/$tag.md > $R/$tag.log 2>&1
  echo "$tag rc $? $(grep -E 'decode batch' $R/$tag.log | awk '{printf "b%s %s ", $5, $8}')" >> $S
done
tar -C $OUT -czf $OUT/results3.tar.gz r3 && rm -rf "$R"
