#!/usr/bin/env bash
# Session 19, prepared for the next GPU session (not run: no device time left). On the tree of
# this session's attention commit: the GPU tests that run attention, with the new KV quantization
# cases (64- and 256-key pages, windows starting between multiples of 32); then the kept tree
# (exl3-bench) against base (exl3-bench-base = 72b71b7) in the model, which this session timed only
# with a merge that is not kept: 8B at 2048-token prompts int8 off, two rounds; 8B int8 auto at
# 32- and 512-token prompts; 70B at 2048-token prompts. Last, the quantized cache's split target
# (kSplitTargetRows, attention_quant.cu: 4096, kept in session 18 because a 4-bit cache lost with
# more splits, each of whose blocks then paid a page lookup per key) at 16384 as the F16 path's:
# exl3-bench-q16k, the same tree with that constant, the attention op at 8- and 4-bit caches. And
# exl3-bench-compact: the same tree with the per-key copy loop (blocks that straddle two pages) not
# unrolled (#pragma unroll 1 in load_kv_block), which cuts the F16 decode kernel from 3,024 to
# 2,176 instructions (48 to 35 KB of code; run 5's unexplained 1-5 us between two builds whose
# decode kernels and merges match suggests code placement matters to this latency-bound kernel).
# Bundle: exl3-bench, exl3-bench-base, exl3-bench-q16k, exl3-bench-compact, cuda_ops_gpu_test, backend_ops_gpu_test, kv_quant_gpu_test,
# quantized_cache_model_gpu_test, step_graph_gpu_test, llama_model_gpu_test.
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
t llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*
grep -h -B2 -A6 "Failure" $R/*.log | head -40 >> $S
cp $B/exl3-bench $B/exl3-bench-load
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for round in 1 2; do
  for v in base load; do
    timeout 90 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16,32,64 \
      --decode-prompt 2048 --decode-steps 32 --int8-activations off > $R/p2048-$v-$round.log 2>&1
    echo "8b p2048 off $v round $round: $(grep -E 'decode batch' $R/p2048-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
for p in 32 512; do
  for v in base load; do
    timeout 60 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,32 \
      --decode-prompt $p --decode-steps 64 --int8-activations auto > $R/p$p-$v.log 2>&1
    echo "8b p$p auto $v: $(grep -E 'decode batch' $R/p$p-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
rm -rf /tmp/m8
$B/exl3-bench make-model --shape llama-3.1-70b --out /tmp/m70 > $R/make-70b.log 2>&1
for v in base load; do
  timeout 120 $B/exl3-bench-$v model --model /tmp/m70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,16,32 \
    --decode-prompt 2048 --decode-steps 8 --int8-activations auto > $R/70b-p2048-$v.log 2>&1
  echo "70b p2048 auto $v: $(grep -E 'decode batch' $R/70b-p2048-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done
rm -rf /tmp/m70
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b-2.log 2>&1
for bits in 8 4; do
  for ctx in 512 2048 8192; do
    for v in load q16k; do
      timeout 60 $B/exl3-bench-$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16,32,64 --context $ctx --timing graph \
        --cache-bits $bits --markdown $R/kernels-$v-k$bits-ctx$ctx.md > $R/kernels-$v-k$bits-ctx$ctx.log 2>&1
      echo "attention cache $bits ctx $ctx $v: $(grep -E '^\| attention' $R/kernels-$v-k$bits-ctx$ctx.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
    done
  done
done
for round in 1 2; do
  for v in load compact; do
    for ctx in 512 2048; do
      timeout 60 $B/exl3-bench-$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16,32,64 --context $ctx --timing graph \
        --markdown $R/kernels-$v-ctx$ctx-$round.md > $R/kernels-$v-ctx$ctx-$round.log 2>&1
      echo "attention ctx $ctx $v round $round: $(grep -E '^\| attention' $R/kernels-$v-ctx$ctx-$round.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
    done
    timeout 60 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16 \
      --decode-prompt 512 --decode-steps 64 --int8-activations auto > $R/p512-$v-$round.log 2>&1
    echo "8b p512 auto $v round $round: $(grep -E 'decode batch' $R/p512-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
