#!/usr/bin/env bash
# Session 20, run 4 (run 3 was the 2- and 3-bit and K4/V8 widths, a one-line
# command run on run 2's bundle: summary3.txt). The tree with the quantized cache's split target
# by width (16384, 4096 where both sides are 4 bits): the GPU tests that run attention or plan its
# scratch, then the op at 4-, 8- and 6-bit caches, 2048 keys (should match run 2's q4k at 4 bits,
# q16k otherwise). Then short contexts without splits: exl3-bench-ns128 / -ns256 are the same tree
# with plan_splits keeping one split while the context has at most 128 / 256 keys (no merge
# launch; one warp walks the whole context): the F16 op at 64, 96, 160, 256 keys, batch 1, 4, 16,
# and the 8B at 32-token prompts (contexts 33-96 while timed), int8 auto, batch 1, 4, two rounds.
# Bundle: exl3-bench, exl3-bench-ns128, exl3-bench-ns256, kv_quant_gpu_test, cuda_ops_gpu_test,
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
for bits in 4 8 6; do
  timeout 60 $B/exl3-bench kernels --model /tmp/m8 --backend cuda --rows 1,4,16,32,64 --context 2048 --timing graph \
    --cache-bits $bits --markdown $R/kernels-k$bits.md > $R/kernels-k$bits.log 2>&1
  echo "attention cache $bits ctx 2048 kept: $(grep -E '^\| attention' $R/kernels-k$bits.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
done
for ctx in 64 96 160 256; do
  for v in kept ns128 ns256; do
    timeout 60 $B/exl3-bench-$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16 --context $ctx --timing graph \
      --markdown $R/kernels-$v-ctx$ctx.md > $R/kernels-$v-ctx$ctx.log 2>&1
    echo "attention f16 ctx $ctx $v: $(grep -E '^\| attention' $R/kernels-$v-ctx$ctx.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
  done
done
for round in 1 2; do
  for v in kept ns128 ns256; do
    timeout 60 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4 \
      --decode-prompt 32 --decode-steps 64 --int8-activations auto > $R/p32-$v-$round.log 2>&1
    echo "8b p32 auto $v round $round: $(grep -E 'decode batch' $R/p32-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
