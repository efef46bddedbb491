#!/usr/bin/env bash
# Session 27, run 1 (prepared in session 26 as its run 9, on branch s26-row-sums-order, bf1b403):
# ord, the fp16 few-rows matmul adding MUL1's row sums of a block's own slice in block order
# (per-(row, 128-input block) sums in shared memory, one more block barrier) instead of
# shared-memory atomics, so that 1-5 rows (the default batch-1 path) give the same bits run to run.
# Its GPU tests (exl3_linear's new run-to-run test, backend ops, cuda ops, step graph, llama
# model), then ord against main 9e3a56e: the fp16 linear at 1-5 rows on the 8B's shapes, three
# rounds of the 8B decode with int8 off at batch 1-4, two of the 70B at batch 1. Bundle:
# exl3-bench-main (main 9e3a56e), exl3-bench-ord and the five *_gpu_test binaries (bf1b403).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_linear_gpu_test backend_ops_gpu_test cuda_ops_gpu_test step_graph_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ') at $SECONDS s" >> $S
done
timeout 200 $B/llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*TwoPointFive* > $R/llama_model_gpu_test.log 2>&1
echo "llama_model_gpu_test rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/llama_model_gpu_test.log | tr '\n' ' ') at $SECONDS s" >> $S
grep -h -B2 -A8 "Failure" $R/*_gpu_test.log | head -60 >> $S
for r in 1 2; do for v in main ord; do
  timeout 60 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --rows 1,2,4,5 --no-check --linear-bits 0 --int8 \
    --shapes 4096x4096,4096x6144,4096x28672,14336x4096 --markdown $R/gemv-$v-$r.md > $R/gemv-$v-$r.log 2>&1
  echo "gemv $v r$r rc $?: $(grep -E '^\| linear-f16' $R/gemv-$v-$r.md | awk -F'|' '{printf "%s/%s %s  ", $3, $6, $7}')" >> $S
done; done
M8=/tmp/m8; M70=/tmp/m70
$B/exl3-bench-main make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
for r in 1 2 3; do for v in main ord; do
  timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2,4 \
    --decode-steps 64 --int8-activations off > $R/m8-$v-$r.log 2>&1
  echo "8b off $v r$r rc $?: $(grep -E 'decode batch' $R/m8-$v-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done
$B/exl3-bench-main make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $? at $SECONDS s" >> $S
for r in 1 2; do for v in main ord; do
  timeout 60 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 \
    --decode-steps 32 --int8-activations off > $R/m70-$v-$r.log 2>&1
  echo "70b off $v r$r rc $?: $(grep -E 'decode batch' $R/m70-$v-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done
rm -rf $M70
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
