#!/usr/bin/env bash
# Session 22, run 2 (prepared, not run: the session's device time was spent on failed starts): the
# tree with single-token helper warps for quantized caches (1882b50) as it landed. First the GPU
# tests that run decode attention (kv_quant's lone-token cases take the 4-warp blocks; run 1 ran
# the 4-warp kernels at every batch, da4), then the 8B int8 off with 4-bit and 8-bit caches at
# batch 1-4 against 047d04f (exl3-bench-base), two rounds, which also shows batches 2-3 (one-warp
# blocks: run 1 measured the helpers at 1 and 4 only). PART=all adds session 21's run8.sh target
# part (every target's figure; on an H200 the H200 column dates from sessions 10-12).
# Bundle: exl3-bench (HEAD), exl3-bench-base (047d04f), kv_quant_gpu_test, cuda_ops_gpu_test,
# quantized_cache_model_gpu_test, backend_ops_gpu_test, step_graph_gpu_test, llama_model_gpu_test,
# and for PART=all exl3-launch, exl3-coordinator, exl3-worker.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export PATH=$B:$PATH EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
for t in kv_quant_gpu_test cuda_ops_gpu_test quantized_cache_model_gpu_test backend_ops_gpu_test step_graph_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
# The HF and 2.5-bpw fixtures live in ../shared, which does not travel.
timeout 150 $B/llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*TwoPointFive* > $R/llama_model_gpu_test.log 2>&1
echo "llama_model_gpu_test rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/llama_model_gpu_test.log | tr '\n' ' ')" >> $S
grep -h -B2 -A6 "Failure" $R/*_test.log | head -40 >> $S
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
cp $B/exl3-bench $B/exl3-bench-head
for round in 1 2; do
  for p in 2048 512; do
    for bits in 4 8; do
      for v in base head; do
        log=$R/p$p-k$bits-$v-$round.log
        timeout 90 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2,3,4 \
          --decode-prompt $p --decode-steps 32 --int8-activations off --cache-bits $bits > $log 2>&1
        echo "8b p$p off cache $bits $v round $round: $(grep -E 'decode batch' $log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
      done
    done
  done
done
echo "models done at $SECONDS s" >> $S
echo "done at $SECONDS s" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
# Every target's figure (run1.sh's target part; its own summary and results under $OUT/targets).
if [[ ${PART:-} == all ]]; then mkdir -p $OUT/targets && OUT=$OUT/targets PART=targets bash bench/results/2026-12-05-s22/run1.sh; fi
cat $S
