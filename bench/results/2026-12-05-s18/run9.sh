#!/usr/bin/env bash
# Session 18, run 9: kTargetRows 16384 (t16k, run 8's best in the model) as the tree would keep it:
# the GPU tests that run attention (cuda ops, backend ops, KV quantization, quantized-cache model,
# llama_model, step graphs), the attention op alone with an 8-bit and a 4-bit cache at 2048 keys
# (the quantized path shares the split plan), and one more round of the 8B at 2048-token prompts.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
t() {  # binary [args]
  local start=$SECONDS
  timeout 150 $B/$1 "${@:2}" > $R/$1.log 2>&1
  echo "$1 rc $? $((SECONDS - start)) s $(grep -E '^\[  (PASSED|FAILED) ' $R/$1.log | tr '\n' ' ')" >> $S
}
t cuda_ops_gpu_test
t backend_ops_gpu_test
t kv_quant_gpu_test
t quantized_cache_model_gpu_test
t step_graph_gpu_test
t llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*
grep -h -B2 -A6 "Failure" $R/*.log | head -40 >> $S
$B/exl3-bench-base make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for bits in 8 4; do
  for v in base t16k; do
    timeout 60 $B/exl3-bench-$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16,32,64 --context 2048 --timing graph \
      --cache-bits $bits --markdown $R/kernels-$v-k$bits.md > $R/kernels-$v-k$bits.log 2>&1
    echo "attention ctx 2048 cache $bits $v: $(grep -E '^\| attention' $R/kernels-$v-k$bits.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
  done
done
for v in base t16k; do
  timeout 90 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,8,16,32,64 \
    --decode-prompt 2048 --decode-steps 32 --int8-activations off > $R/p2048-$v.log 2>&1
  echo "8b p2048 $v: $(grep -E 'decode batch' $R/p2048-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
