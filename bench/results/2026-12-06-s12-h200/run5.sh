#!/usr/bin/env bash
# Session 12 on one H200, fifth run: the final tree (run 4's plus the review's refactor of
# cuda_linear.cpp, same parameters). GPU tests; exl3-bench model on the 8B (int8 off: prefill
# 128/2048, batch 1-64; auto: batch 1-32), batch 1 at the serve run's context and serve with one
# client (off, auto), and with 8 clients (off). Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export PATH=$B:$PATH EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in backend_ops_gpu_test exl3_gemv_int8_gpu_test exl3_linear_gpu_test step_graph_gpu_test \
  quantized_cache_model_gpu_test llama_model_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
timeout 90 $B/exl3-bench model --model $M8 --backend cuda --prefill 128,2048 --prefill-repeats 2 --batch 1,4,6,7,8,16,32,64 \
  --decode-steps 16 --int8-activations off --json $R/model-8b-off.json --markdown $R/model-8b-off.md > $R/model-8b-off.log 2>&1
echo "model 8b off rc $?" >> $S; grep -E 'decode batch|prefill ' $R/model-8b-off.log | sed "s/^/  off /" >> $S
timeout 60 $B/exl3-bench model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,8,16,32 \
  --decode-steps 16 --int8-activations auto --json $R/model-8b-auto.json --markdown $R/model-8b-auto.md > $R/model-8b-auto.log 2>&1
echo "model 8b auto rc $?" >> $S; grep -E 'decode batch' $R/model-8b-auto.log | sed "s/^/  auto /" >> $S
for i8 in off auto; do
  timeout 60 $B/exl3-bench model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-prompt 128 \
    --decode-steps 512 --warmup 1 --int8-activations $i8 --json $R/model-8b-ctx-$i8.json --markdown $R/model-8b-ctx-$i8.md \
    > $R/model-8b-ctx-$i8.log 2>&1
  echo "model 8b ctx $i8 rc $?" >> $S; grep -E 'decode batch' $R/model-8b-ctx-$i8.log | sed "s/^/  ctx $i8 /" >> $S
  timeout 120 $B/exl3-bench serve --launch "--model $M8 --gpus 0 --split 100 --max-seq-len 4096 --int8-activations $i8" \
    --clients 1 --max-new-tokens 512 --json $R/serve-8b-$i8.json --markdown $R/serve-8b-$i8.md > $R/serve-8b-$i8.log 2>&1
  echo "serve 8b $i8 rc $?" >> $S; tail -1 $R/serve-8b-$i8.md | sed "s/^/  $i8 /" >> $S
done
timeout 120 $B/exl3-bench serve --launch "--model $M8 --gpus 0 --split 100 --max-seq-len 4096" --clients 8 \
  --max-new-tokens 256 --json $R/serve-8b-off-c8.json --markdown $R/serve-8b-off-c8.md > $R/serve-8b-off-c8.log 2>&1
echo "serve 8b off 8 clients rc $?" >> $S; tail -1 $R/serve-8b-off-c8.md | sed "s/^/  off c8 /" >> $S
rm -rf $M8
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
