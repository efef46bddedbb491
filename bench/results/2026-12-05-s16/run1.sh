#!/usr/bin/env bash
# Session 16, first run (one GPU): the GPU tests of main with 8-tile stages up to K = 6
# (s15-stages-k6 cherry-picked) and of the one-shot all-reduce after 1240262 / a928ed0; then
# decode attention with splits of at least 32 keys (-attn32: F16Source::kMinKeysPerSplit 64 -> 32)
# against main: its tests, and 8B decode (int8 auto) at a 32-, 512- and 2048-token prompt.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
t() {  # binary [args]
  local start=$SECONDS
  timeout 150 $B/$1 "${@:2}" > $R/$1.log 2>&1
  echo "$1 rc $? $((SECONDS - start)) s $(grep -E '^\[  (PASSED|FAILED) ' $R/$1.log | tr '\n' ' ')" >> $S
}
for x in exl3_linear_gpu_test exl3_gemv_int8_gpu_test step_graph_gpu_test oneshot_all_reduce_gpu_test \
         p2p_all_reduce_gpu_test gemv_bench_gpu_test backend_ops_gpu_test cuda_ops_gpu_test-attn32 \
         step_graph_gpu_test-attn32 backend_ops_gpu_test-attn32; do t $x; done
t llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*
grep -h -B2 -A6 "Failure" $R/*.log | head -60 >> $S
ab() {  # variant batches tag [extra]
  [ $SECONDS -lt 500 ] || { echo "ab $3 $1 skipped (time)" >> $S; return; }
  timeout 90 $B/$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $2 \
    --decode-steps 16 --int8-activations auto ${4:-} --json $R/ab-$3-$1.json > $R/ab-$3-$1.log 2>&1
  echo "ab $3 $1 rc $?" >> $S; grep -E 'decode batch' $R/ab-$3-$1.log | sed "s/^/  $3 $1 /" >> $S
}
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
for r in 1 2; do
  for v in exl3-bench exl3-bench-attn32; do ab $v 1,8 c32r$r; done
  for v in exl3-bench exl3-bench-attn32; do ab $v 1,8 c512r$r "--decode-prompt 512"; done
  for v in exl3-bench exl3-bench-attn32; do ab $v 1,4 c2kr$r "--decode-prompt 2048"; done
done
echo "done at $SECONDS s" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
