#!/usr/bin/env bash
# Session 23, run 1. First the tensor-core probe (tensor_probe.cu: the wgmma layout checks and the
# mma.sync / wgmma rates), then the int8 GEMV with warpgroup products for 9-32 rows (branch
# s23-wgmma-probe, "-wg" binaries): its GPU tests, and the whole MUL1 linear (exl3-bench gemv
# --int8) against main ff21461 (exl3-bench: mma.sync products); "-wgs" the same with the
# descriptor's two byte offsets swapped (leading = between row groups, stride = between core
# columns), in case the probe finds that reading; then the 8B decode at batch 8-32 with int8
# activations to 32 rows (exl3-bench-wg32: kInt8ActivationsMaxRows 32) against int8 off, and the
# GPU tests of ff21461 that run decode attention (session 22's run 2, first half).
# Bundle: tensor-probe (nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a), exl3-bench
# (ff21461), exl3-bench-{wg,wgs,wg32} and exl3_gemv_int8_gpu_test-{wg,wgs} (the branch), and
# run2.sh's six GPU tests (ff21461).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader > $S
timeout 60 $B/tensor-probe >> $S 2>&1; echo "probe rc $?" >> $S
cat $S
for w in wg wgs; do
  timeout 150 $B/exl3_gemv_int8_gpu_test-$w > $R/int8-$w.log 2>&1
  echo "exl3_gemv_int8_gpu_test-$w rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/int8-$w.log | tr '\n' ' ')" >> $S
  grep -h -B2 -A8 "Failure" $R/int8-$w.log | head -24 >> $S
done
for v in exl3-bench-wg exl3-bench-wgs exl3-bench; do
  timeout 120 $B/$v gemv --bits 4 --codebooks mul1 --int8 --no-check --linear-bits 0 --rows 8,9,16,24,32 \
    --shapes 4096x4096,4096x28672,14336x4096,8192x28672 --json $R/gemv-$v.json --markdown $R/gemv-$v.md > $R/gemv-$v.log 2>&1
  echo "gemv $v rc $? at $SECONDS s" >> $S
  grep -E "linear-(int8|f16)" $R/gemv-$v.md >> $S
done
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
for round in 1 2; do
  for mode in auto off; do
    log=$R/m8-$mode-$round.log
    timeout 90 $B/exl3-bench-wg32 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 \
      --batch 8,9,16,24,32 --decode-steps 32 --int8-activations $mode > $log 2>&1
    echo "8b wg32 int8 $mode round $round: $(grep -E 'decode batch' $log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
for t in kv_quant_gpu_test cuda_ops_gpu_test quantized_cache_model_gpu_test backend_ops_gpu_test step_graph_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
timeout 150 $B/llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*TwoPointFive* > $R/llama_model_gpu_test.log 2>&1
echo "llama_model_gpu_test rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/llama_model_gpu_test.log | tr '\n' ' ')" >> $S
grep -h -B2 -A6 "Failure" $R/*_test.log | head -40 >> $S
echo "done at $SECONDS s" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
