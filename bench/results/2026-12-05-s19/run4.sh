#!/usr/bin/env bash
# Session 19, run 4: the tree as committed (final: run 3's `load`, and the merge chosen by the split
# count: the serial merge up to 32 splits, run 3's phased merge above), against base (72b71b7) and
# load. The GPU tests that run attention; the attention op alone (512 / 2048 / 8192 keys); the 8B
# at 2048-token prompts (int8 off, two rounds) and 32-token prompts (int8 auto); the 70B at
# 2048-token prompts.
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
$B/exl3-bench-final make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for ctx in 512 2048 8192; do
  for v in base load final; do
    timeout 60 $B/exl3-bench-$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16,32,64 --context $ctx --timing graph \
      --markdown $R/kernels-$v-ctx$ctx.md > $R/kernels-$v-ctx$ctx.log 2>&1
    echo "attention ctx $ctx $v: $(grep -E '^\| attention' $R/kernels-$v-ctx$ctx.md | awk -F'|' '{print $6 "(" $11 ")"}' | tr -s ' ' | tr '\n' ' ')" >> $S
  done
done
for round in 1 2; do
  for v in base final; do
    timeout 90 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16,32,64 \
      --decode-prompt 2048 --decode-steps 32 --int8-activations off > $R/p2048-$v-$round.log 2>&1
    echo "8b p2048 off $v round $round: $(grep -E 'decode batch' $R/p2048-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
for v in base final; do
  timeout 60 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,32 \
    --decode-steps 64 --int8-activations auto > $R/p32-$v.log 2>&1
  echo "8b p32 auto $v: $(grep -E 'decode batch' $R/p32-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done
rm -rf /tmp/m8
$B/exl3-bench-final make-model --shape llama-3.1-70b --out /tmp/m70 > $R/make-70b.log 2>&1
for v in base final; do
  timeout 120 $B/exl3-bench-$v model --model /tmp/m70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,16,32 \
    --decode-prompt 2048 --decode-steps 8 --int8-activations auto > $R/70b-p2048-$v.log 2>&1
  echo "70b p2048 auto $v: $(grep -E 'decode batch' $R/70b-p2048-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
