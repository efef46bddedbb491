#!/usr/bin/env bash
# Session 26, run 8: sq4, sq3 with block_norm_scales' own read of the row as on main (run 7: sq3's
# per-block order cost int8 auto 3.7% on the 8B and 3.3% on the 70B, whose int8 consumers read the
# row), the block sums for fp16 consumers only. The GPU tests the change touches, built as sq4, then
# four alternating rounds of batch 1 (8B int8 auto and off; 70B, two) against main 7eef708.
# Bundle: exl3-bench-main, exl3-bench-sq4, three *_gpu_test binaries (sq4).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in backend_ops_gpu_test step_graph_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ') at $SECONDS s" >> $S
done
timeout 200 $B/llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*TwoPointFive* > $R/llama_model_gpu_test.log 2>&1
echo "llama_model_gpu_test rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/llama_model_gpu_test.log | tr '\n' ' ') at $SECONDS s" >> $S
grep -h -B2 -A8 "Failure" $R/*_gpu_test.log | head -60 >> $S
M8=/tmp/m8; M70=/tmp/m70
$B/exl3-bench-main make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
for r in 1 2 3 4; do for v in main sq4; do for i8 in auto off; do
  timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 \
    --decode-steps 128 --int8-activations $i8 > $R/m8-$v-$i8-$r.log 2>&1
  echo "8b $i8 $v r$r rc $?: $(grep -E 'decode batch' $R/m8-$v-$i8-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done; done
echo "8b done at $SECONDS s" >> $S
$B/exl3-bench-main make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $? at $SECONDS s" >> $S
for r in 1 2; do for v in main sq4; do for i8 in auto off; do
  timeout 60 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 \
    --decode-steps 32 --int8-activations $i8 > $R/m70-$v-$i8-$r.log 2>&1
  echo "70b $i8 $v r$r rc $?: $(grep -E 'decode batch' $R/m70-$v-$i8-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done; done
rm -rf $M70
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
