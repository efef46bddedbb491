#!/usr/bin/env bash
# Session 27, run 9 (prepared, not run: the device time was spent): lu (branch s27-ldlu, the
# output passes reading the partials as their last use) against main, in enough rounds to tell a
# 1-2% change: its GPU tests (backend ops, exl3_linear, step graph, llama model), then four
# alternating rounds of the 8B decode at batch 1, 4, 32 with int8 auto and off, and two of the
# 70B at batch 1 and 32. Bundle: exl3-bench-main (main), exl3-bench-lu and the four *_gpu_test
# binaries built from s27-ldlu.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_linear_gpu_test backend_ops_gpu_test step_graph_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ') at $SECONDS s" >> $S
done
timeout 200 $B/llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*TwoPointFive* > $R/llama_model_gpu_test.log 2>&1
echo "llama_model_gpu_test rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/llama_model_gpu_test.log | tr '\n' ' ') at $SECONDS s" >> $S
grep -h -B2 -A8 "Failure" $R/*_gpu_test.log | head -60 >> $S
M8=/tmp/m8; M70=/tmp/m70
[[ -d $M8 ]] || $B/exl3-bench-main make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b at $SECONDS s" >> $S
for r in 1 2 3 4; do for v in main lu; do for i8 in auto off; do
  timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,32 \
    --decode-steps 48 --int8-activations $i8 > $R/m8-$v-$i8-$r.log 2>&1
  echo "8b $i8 $v r$r rc $?: $(grep -E 'decode batch' $R/m8-$v-$i8-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done; done
[[ -d $M70 ]] || $B/exl3-bench-main make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b at $SECONDS s" >> $S
for r in 1 2; do for v in main lu; do
  timeout 90 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,32 \
    --decode-steps 24 --int8-activations auto > $R/m70-$v-$r.log 2>&1
  echo "70b auto $v r$r rc $?: $(grep -E 'decode batch' $R/m70-$v-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
