#!/usr/bin/env bash
# Session 20, prepared for the next GPU session (no device time left): branch s20-token-splits,
# where each decode token splits its own context (attention_split::token_splits: its keys from its
# window's first block in at most the plan's splits, the fewest blocks per split) instead of
# cutting [0, max_position] into the plan's chunks. A step graph plans for its page bucket's last
# position (page columns rounded up to a power of two: 2,082 keys plan as 4,096), so today a token
# fills only the splits its context reaches, each with the plan's chunk: at batch 32 and a 4-bit
# cache 2 of 4 splits of 1,024 keys (run 6: ~280 us of attention a layer in the model against the
# op's 143 at exactly 2,048 keys). First the GPU tests that run attention (the bucket-graph and
# window cases take the new split); then the branch (exl3-bench) against main
# (exl3-bench-main) in the model, 8B at 2048-token prompts int8 off at cache widths 16, 8 and 4,
# batch 1-64, and 512-token prompts int8 auto; exl3-bench-tq16k is the branch with the quantized
# split target at 16384 for 4/4 too (main keeps 4096 there from the op at exact contexts, which the
# branch's model should now follow). Then the op alone at 2048 keys (exact: should be unchanged),
# and last a second round of the 4,4 rows (~8-9 minutes in all).
# Bundle: exl3-bench, exl3-bench-main, exl3-bench-tq16k, kv_quant_gpu_test, cuda_ops_gpu_test,
# backend_ops_gpu_test, quantized_cache_model_gpu_test, step_graph_gpu_test, llama_model_gpu_test,
# cuda_allocation_gpu_test. exl3-bench-main: main's exl3-bench at the branch's last merge of main
# (session 21: 91d46d5; main's kernels as 3494c2d, plus 60ee23e's host-side scratch constants, which
# this run is also the first GPU run of); exl3-bench-tq16k: the branch with
# QuantSource::split_target_rows returning 16384 (attention_quant.cu). Session 21 built all three
# and the tests (Release sm_90) into build/s21-prep/bin (git-ignored under build/).
# PART=1: the GPU tests and the 2048-token rows (round 1); PART=2: the 512-token rows, the op alone
# and 4,4's second round (each part within one 10-minute device call); unset: both.
set -u
P=${PART:-all}; one() { [[ $P == all || $P == 1 ]]; }; two() { [[ $P == all || $P == 2 ]]; }
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
t() {  # binary [args]
  local start=$SECONDS
  timeout 150 $B/$1 "${@:2}" > $R/$1.log 2>&1
  echo "$1 rc $? $((SECONDS - start)) s $(grep -E '^\[  (PASSED|FAILED) ' $R/$1.log | tr '\n' ' ')" >> $S
}
if one; then
  t kv_quant_gpu_test
  t cuda_ops_gpu_test
  t backend_ops_gpu_test
  t quantized_cache_model_gpu_test
  t step_graph_gpu_test
  t cuda_allocation_gpu_test
  t llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*
  grep -h -B2 -A6 "Failure" $R/*.log | head -40 >> $S
fi
cp $B/exl3-bench $B/exl3-bench-branch
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
m() {  # variant prompt int8 cache-bits batches [round]
  local log=$R/p$2-$3-k$4-$1-${6:-1}.log
  timeout 90 $B/exl3-bench-$1 model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $5 \
    --decode-prompt $2 --decode-steps 32 --int8-activations $3 --cache-bits $4 > $log 2>&1
  echo "8b p$2 $3 cache $4 $1 round ${6:-1}: $(grep -E 'decode batch' $log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
}
if one; then
  for bits in 16 8 4; do
    for v in main branch; do m $v 2048 off $bits 1,4,16,32,64; done
  done
  m tq16k 2048 off 4 1,4,16,32,64
fi
two || { echo "done at $SECONDS s" >> $S; tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R; cat $S; exit 0; }
for v in main branch; do m $v 512 auto 16 1,4,16,32; done
for bits in 16 8 4; do
  for v in main branch; do
    timeout 60 $B/exl3-bench-$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16,32,64 --context 2048 --timing graph \
      --cache-bits $bits --markdown $R/kernels-$v-k$bits.md > $R/kernels-$v-k$bits.log 2>&1
    echo "attention cache $bits ctx 2048 $v: $(grep -E '^\| attention' $R/kernels-$v-k$bits.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
  done
done
for v in main branch tq16k; do m $v 2048 off 4 1,4,16,32,64 2; done  # 4,4's second round
for bits in 16 8; do  # and the other widths' (session 21: round 1 had F16 batch 32 -1.5%)
  for v in main branch; do m $v 2048 off $bits 1,4,16,32,64 2; done
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
