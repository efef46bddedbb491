#!/usr/bin/env bash
# Session 19, run 6: a third merge, u16: base's serial merge (a thread a column) with its loop
# over the splits unrolled 16 times (16 loads in flight), one kernel for every split count, against
# load (base's merge) and final (run 4's serial/phased pair); the GPU tests that run
# attention on u16's tree; the 8B at 512- and 2048-token prompts.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
t() {  # binary [args]
  local start=$SECONDS
  timeout 150 $B/$1 "${@:2}" > $R/$1.log 2>&1
  echo "$1 rc $? $((SECONDS - start)) s $(grep -E '^\[  (PASSED|FAILED) ' $R/$1.log | tr '\n' ' ')" >> $S
}
$B/exl3-bench-u16 make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for round in 1; do
  for ctx in 512 2048 8192; do
    for v in load final u16; do
      timeout 60 $B/exl3-bench-$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16,32,64 --context $ctx --timing graph \
        --markdown $R/kernels-$v-ctx$ctx-$round.md > $R/kernels-$v-ctx$ctx-$round.log 2>&1
      echo "attention ctx $ctx $v round $round: $(grep -E '^\| attention' $R/kernels-$v-ctx$ctx-$round.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
    done
  done
done
t cuda_ops_gpu_test
t backend_ops_gpu_test
t kv_quant_gpu_test
t quantized_cache_model_gpu_test
t step_graph_gpu_test
t llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*
grep -h -B2 -A6 "Failure" $R/*.log | head -40 >> $S
for p in 512 2048; do
  for v in load u16; do
    timeout 60 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16 \
      --decode-prompt $p --decode-steps 64 --int8-activations auto > $R/p$p-$v.log 2>&1
    echo "8b p$p auto $v: $(grep -E 'decode batch' $R/p$p-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
