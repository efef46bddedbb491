#!/usr/bin/env bash
# Session 18, run 5: int8 hand-offs into two-block stages and from one row. Until now the int8
# kernel's two-block stages (planned at 1-2 rows, K <= 6) took no staged input, so neither
# hand-off (the linear_add's norm hand-off, the gated product's input hand-off) was ever taken at
# one row with int8 activations, nor at two rows where the plan chose those stages. Variants, all
# of one tree but for constants: base (HEAD 733599c); w2 (two-block stages take a staged input,
# hand-offs still from 2 rows); w1n (and the int8 norm hand-off from 1 row); w1 (and the input
# hand-off from 1 row). GPU tests of w1; 8B int8 auto batch 1-4, three interleaved rounds; 70B
# int8 auto batch 1-2, one round.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
t() {  # binary [args]
  local start=$SECONDS
  timeout 150 $B/$1 "${@:2}" > $R/$1.log 2>&1
  echo "$1 rc $? $((SECONDS - start)) s $(grep -E '^\[  (PASSED|FAILED) ' $R/$1.log | tr '\n' ' ')" >> $S
}
t backend_ops_gpu_test
t exl3_gemv_int8_gpu_test
t step_graph_gpu_test
t llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*
grep -h -B2 -A6 "Failure" $R/*.log | head -40 >> $S
$B/exl3-bench-base make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for round in 1 2 3; do
  for v in base w2 w1n w1; do
    timeout 60 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2,3,4 \
      --decode-steps 64 --int8-activations auto > $R/8b-$v-$round.log 2>&1
    echo "8b $v round $round: $(grep -E 'decode batch' $R/8b-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
rm -rf /tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-70b --out /tmp/m70 > $R/make-70b.log 2>&1
for v in base w1; do
  timeout 90 $B/exl3-bench-$v model --model /tmp/m70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2 \
    --decode-steps 32 --int8-activations auto > $R/70b-$v.log 2>&1
  echo "70b $v: $(grep -E 'decode batch' $R/70b-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
