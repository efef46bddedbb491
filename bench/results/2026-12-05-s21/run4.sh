#!/usr/bin/env bash
# Session 21, run 4: the kept tree (main with the quantized caches' split target at 16384 rows at
# every width, as run 3's exl3-bench-q16kall): the GPU tests that run the quantized cache's
# attention, then the 8B at 2048-token prompts, int8 off, cache 4,4 and 8,4, batch 1-64.
# Bundle: exl3-bench, kv_quant_gpu_test, quantized_cache_model_gpu_test, backend_ops_gpu_test,
# step_graph_gpu_test.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
for t in kv_quant_gpu_test quantized_cache_model_gpu_test backend_ops_gpu_test step_graph_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
grep -h -B2 -A6 "Failure" $R/*.log | head -40 >> $S
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for bits in 4 8,4; do
  log=$R/p2048-k$bits.log
  timeout 90 $B/exl3-bench model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16,32,64 \
    --decode-prompt 2048 --decode-steps 32 --int8-activations off --cache-bits $bits > $log 2>&1
  echo "8b p2048 off cache $bits: $(grep -E 'decode batch' $log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
