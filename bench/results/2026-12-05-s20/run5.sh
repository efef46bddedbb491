#!/usr/bin/env bash
# Session 20, run 5: the tree with contexts of at most 128 keys unsplit on the F16 path
# (kUnsplitMaxKeys, attention.cu) beside the per-width split target: the GPU tests that run
# attention or plan its splits; the 8B at 32-token prompts (contexts 33-96 while timed), int8 auto,
# batch 1, 4, 16, two rounds, against exl3-bench-split (the same tree with kUnsplitMaxKeys 0, as
# run 4's tree); and the quantized path with the same rule (exl3-bench-qns128) against the tree
# (quantized contexts always split), 4- and 8-bit caches at 64, 96 and 160 keys, batch 1, 4, 16.
# Bundle: exl3-bench, exl3-bench-split, exl3-bench-qns128, kv_quant_gpu_test, cuda_ops_gpu_test,
# backend_ops_gpu_test, quantized_cache_model_gpu_test, step_graph_gpu_test, llama_model_gpu_test,
# cuda_allocation_gpu_test.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
t() {  # binary [args]
  local start=$SECONDS
  timeout 150 $B/$1 "${@:2}" > $R/$1.log 2>&1
  echo "$1 rc $? $((SECONDS - start)) s $(grep -E '^\[  (PASSED|FAILED) ' $R/$1.log | tr '\n' ' ')" >> $S
}
t kv_quant_gpu_test
t cuda_ops_gpu_test
t backend_ops_gpu_test
t quantized_cache_model_gpu_test
t step_graph_gpu_test
t cuda_allocation_gpu_test
t llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*
grep -h -B2 -A6 "Failure" $R/*.log | head -40 >> $S
cp $B/exl3-bench $B/exl3-bench-kept
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for round in 1 2; do
  for v in split kept; do
    timeout 60 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16 \
      --decode-prompt 32 --decode-steps 64 --int8-activations auto > $R/p32-$v-$round.log 2>&1
    echo "8b p32 auto $v round $round: $(grep -E 'decode batch' $R/p32-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
for bits in 4 8; do
  for ctx in 64 96 160; do
    for v in kept qns128; do
      timeout 60 $B/exl3-bench-$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16 --context $ctx --timing graph \
        --cache-bits $bits --markdown $R/kernels-$v-k$bits-ctx$ctx.md > $R/kernels-$v-k$bits-ctx$ctx.log 2>&1
      echo "attention cache $bits ctx $ctx $v: $(grep -E '^\| attention' $R/kernels-$v-k$bits-ctx$ctx.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
    done
  done
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
