#!/usr/bin/env bash
# Session 27, run 2: even, the few-rows matmuls (fp16 and int8) with k-slices cut evenly by 128-input
# blocks (no short last slice) and each slice's n-tiles cut evenly by its blocks (a block's work
# varies by one n-tile, where the warps of a slice's first blocks took one n-tile more), branch
# s27-even-slices, against main 9932ac0. even's GPU tests; the linears at 1, 2, 16 and 32 rows (int8
# to 2 rows, fp16 at all four) on the 70B's and 8B's shapes, two rounds; the 8B decode at batch 1,
# 2, 4, 16, 32 (int8 auto), two rounds, batch 32 with int8 off too; the 70B at batch 1 and 32.
# Bundle: exl3-bench-main (main 9932ac0), exl3-bench-even and five *_gpu_test binaries (branch).
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
for r in 1 2; do for v in main even; do
  timeout 90 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --rows 1,2,16,32 --no-check --linear-bits 0 --int8 \
    --shapes 8192x28672,28672x8192,4096x28672,14336x4096,4096x4096,4096x6144 --markdown $R/gemv-$v-$r.md > $R/gemv-$v-$r.log 2>&1
  echo "gemv $v r$r rc $?: $(grep -E '^\| linear-' $R/gemv-$v-$r.md | awk -F'|' '{printf "%s %s/%s %s  ", substr($2,9,4), $3, $6, $7}')" >> $S
done; done
M8=/tmp/m8; M70=/tmp/m70
$B/exl3-bench-main make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
for r in 1 2; do for v in main even; do
  timeout 90 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2,4,16,32 \
    --decode-steps 48 --int8-activations auto > $R/m8-$v-$r.log 2>&1
  echo "8b auto $v r$r rc $?: $(grep -E 'decode batch' $R/m8-$v-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done
for v in main even; do
  timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 32 \
    --decode-steps 48 --int8-activations off > $R/m8off-$v.log 2>&1
  echo "8b off $v rc $?: $(grep -E 'decode batch' $R/m8off-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done
$B/exl3-bench-main make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $? at $SECONDS s" >> $S
for v in main even main even; do
  timeout 90 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,32 \
    --decode-steps 24 --int8-activations auto > $R/m70-$v.log 2>&1
  echo "70b auto $v rc $?: $(grep -E 'decode batch' $R/m70-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done
rm -rf $M70
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
