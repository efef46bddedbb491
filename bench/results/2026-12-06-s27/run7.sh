#!/usr/bin/env bash
# Session 27, run 7: l2fl (run 6's second variant: trellis streams under L2 evict-first, partial
# products stored under evict-last; branch s27-l2-policy) before merging: its GPU tests, then
# against main 9932ac0 the 8B decode at batch 1, 4, 32 with int8 auto and off, two rounds, and
# the 70B at batch 1 and 32 (auto). Bundle: exl3-bench-main, exl3-bench-l2fl, five *_gpu_test
# binaries (the branch).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_gemv_int8_gpu_test exl3_linear_gpu_test backend_ops_gpu_test step_graph_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ') at $SECONDS s" >> $S
done
timeout 200 $B/llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*TwoPointFive* > $R/llama_model_gpu_test.log 2>&1
echo "llama_model_gpu_test rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/llama_model_gpu_test.log | tr '\n' ' ') at $SECONDS s" >> $S
grep -h -B2 -A8 "Failure" $R/*_gpu_test.log | head -60 >> $S
M8=/tmp/m8; M70=/tmp/m70
[[ -d $M8 ]] || $B/exl3-bench-main make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b at $SECONDS s" >> $S
for r in 1 2; do for v in main l2fl; do for i8 in auto off; do
  timeout 90 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,32 \
    --decode-steps 48 --int8-activations $i8 > $R/m8-$v-$i8-$r.log 2>&1
  echo "8b $i8 $v r$r rc $?: $(grep -E 'decode batch' $R/m8-$v-$i8-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done; done
[[ -d $M70 ]] || $B/exl3-bench-main make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b at $SECONDS s" >> $S
for v in main l2fl; do
  timeout 90 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,32 \
    --decode-steps 24 --int8-activations auto > $R/m70-$v.log 2>&1
  echo "70b auto $v rc $?: $(grep -E 'decode batch' $R/m70-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
