#!/usr/bin/env bash
# Session 28, run 4: cm (branch s28-attn-cluster-merge: decode attention with 2-8 splits runs each
# (token, KV head, head tile)'s splits as one thread block cluster that merges them through
# distributed shared memory, no merge launch) against main. cm's GPU tests (kv_quant with the new
# cluster-merge cases); the attention op alone (exl3-bench kernels, 8B layer 0) at contexts 160,
# 256 (clusters at every row count) and 1024 (clusters only at 64 rows) for 1, 16, 32, 64
# sequences, two rounds; the 8B decode at batch 1, 4, 16, 32 (int8 auto) in four alternating
# rounds; the 70B at batch 1 and 32 in two. Bundle: exl3-bench-main, exl3-bench-cm and the seven
# *_gpu_test binaries built from cm.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in kv_quant_gpu_test cuda_ops_gpu_test backend_ops_gpu_test step_graph_gpu_test quantized_cache_model_gpu_test; do
  timeout 200 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ') at $SECONDS s" >> $S
done
timeout 200 $B/llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*TwoPointFive* > $R/llama_model_gpu_test.log 2>&1
echo "llama_model_gpu_test rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/llama_model_gpu_test.log | tr '\n' ' ') at $SECONDS s" >> $S
grep -h -B2 -A8 "Failure" $R/*_gpu_test.log | head -60 >> $S
M8=/tmp/m8; M70=/tmp/m70
[[ -d $M8 ]] || $B/exl3-bench-main make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b at $SECONDS s" >> $S
for r in 1 2; do for v in main cm; do for c in 160 256 1024; do
  timeout 120 $B/exl3-bench-$v kernels --model $M8 --backend cuda --rows 1,16,32,64 --context $c \
    --markdown $R/kernels-$v-$c-$r.md > $R/kernels-$v-$c-$r.log 2>&1
  echo "attention ctx $c $v r$r rc $?: $(grep -E '^\| attention' $R/kernels-$v-$c-$r.md | awk -F'|' '{printf "%s/%s ", $3, $6}')" >> $S
done; done; done
for r in 1 2 3 4; do for v in main cm; do
  timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16,32 \
    --decode-steps 48 --int8-activations auto > $R/m8-$v-$r.log 2>&1
  echo "8b auto $v r$r rc $?: $(grep -E 'decode batch' $R/m8-$v-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done
[[ -d $M70 ]] || $B/exl3-bench-main make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b at $SECONDS s" >> $S
for r in 1 2; do for v in main cm; do
  timeout 90 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,32 \
    --decode-steps 24 --int8-activations auto > $R/m70-$v-$r.log 2>&1
  echo "70b auto $v r$r rc $?: $(grep -E 'decode batch' $R/m70-$v-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
