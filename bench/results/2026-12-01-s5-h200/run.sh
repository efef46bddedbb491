#!/usr/bin/env bash
# The session-5 P4 measurements on one H200, with binaries built elsewhere and unpacked into
# /tmp/g/bin (../../../../shared/tools/gpu-bundle): results under $OUT/r (packed into
# $OUT/results.tar.gz), one line per step in $OUT/summary.txt.
set -u
B=/tmp/g/bin; R=$OUT/r; S=$OUT/summary.txt; mkdir -p "$R"
$B/exl3_gemv_int8_gpu_test > $R/exl3_gemv_int8_gpu_test.log 2>&1
echo "int8 test rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/exl3_gemv_int8_gpu_test.log | tr '\n' ' ')" >> $S
M8=/tmp/m8; M70=/tmp/m70
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
timeout 150 $B/exl3-bench gemv --codebooks mul1 --bits 2,3,4,5,6,7,8 --rows 1,2,4,8,16,32 --no-check --linear-bits 0 \
  --int8 --json $R/gemv.json --markdown $R/gemv.md > $R/gemv.log 2>&1; echo "gemv rc $?" >> $S
for i8 in off auto; do
  timeout 150 $B/exl3-bench model --model $M8 --backend cuda --prefill 512,2048 --prefill-repeats 3 --batch 1,2,4,8,16,32 \
    --decode-steps 32 --int8-activations $i8 --json $R/model-8b-$i8.json --markdown $R/model-8b-$i8.md \
    > $R/model-8b-$i8.log 2>&1; echo "model 8b $i8 rc $?" >> $S
done
timeout 120 $B/exl3-bench kernels --model $M8 --backend cuda --rows 1 --timing graph --json $R/kernels-8b.json \
  --markdown $R/kernels-8b.md > $R/kernels-8b.log 2>&1; echo "kernels rc $?" >> $S
for cfg in "off 1 off" "on 1 off" "off 4 off" "on 4 off" "on 1 auto" "on 4 auto"; do
  set -- $cfg; pipe=$1 steps=$2 i8=$3; pf=""; [[ $pipe == off ]] && pf="--no-step-pipeline"
  tag=serve-8b-pipe$pipe-steps$steps-int8$i8
  timeout 120 $B/exl3-bench serve --launch "--model $M8 --gpus 0 --split 100 --max-seq-len 4096 --decode-steps $steps \
--int8-activations $i8 $pf" --clients 1 --max-new-tokens 512 --json $R/$tag.json --markdown $R/$tag.md > $R/$tag.log 2>&1
  echo "$tag rc $?" >> $S
done
$B/exl3-bench make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $?" >> $S
for i8 in off auto; do
  timeout 150 $B/exl3-bench model --model $M70 --backend cuda --prefill 2048 --prefill-repeats 1 --batch 1,16,32 \
    --decode-steps 16 --int8-activations $i8 --json $R/model-70b-$i8.json --markdown $R/model-70b-$i8.md \
    > $R/model-70b-$i8.log 2>&1; echo "model 70b $i8 rc $?" >> $S
done
tar -C $OUT -czf $OUT/results.tar.gz r && rm -rf "$R"
