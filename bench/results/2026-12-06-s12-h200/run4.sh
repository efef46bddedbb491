#!/usr/bin/env bash
# Session 12 on one H200, fourth run: the tree to land (the norm hand-off from 2 rows to 64, blocks of
# 8 warps, none to int8 two-block stages). exl3-bench-nohf: the same tree with cuda_linear_add_handoff
# refusing every hand-off. GPU tests; 8B decode A/B, two rounds (int8 off batch 1-64, auto 1-8); the
# final figures (exl3-bench model: int8 off prefill 128/2048 and batch 1-64, auto batch 1-32; batch 1
# at the serve run's context and serve with one client, off and auto); the 70B with auto at batch 1,
# 4, 32 (both binaries). Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export PATH=$B:$PATH EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in backend_ops_gpu_test exl3_gemv_int8_gpu_test exl3_linear_gpu_test step_graph_gpu_test \
  quantized_cache_model_gpu_test llama_model_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
ab() {  # variant mode batches round [model tag]
  local m=${5:-$M8} tag=${6:-8b}
  timeout 120 $B/$1 model --model $m --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/ab-$tag-$1-$2-$4.json --markdown $R/ab-$tag-$1-$2-$4.md \
    > $R/ab-$tag-$1-$2-$4.log 2>&1
  echo "ab $tag $1 $2 rc $?" >> $S; grep -E 'decode batch' $R/ab-$tag-$1-$2-$4.log | sed "s/^/  $tag $1 $2 /" >> $S
}
for round in a b; do
  for v in exl3-bench-nohf exl3-bench; do
    ab $v off 1,2,4,8,16,32,64 $round
    ab $v auto 2,4,8 $round
  done
done
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
rm -rf $M8
cp $S $R/; tar -C $OUT -cJf $OUT/results.tar.xz r
M70=/tmp/m70
$B/exl3-bench make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $?" >> $S
for v in exl3-bench-nohf exl3-bench; do ab $v auto 1,4,32 a $M70 70b; done
rm -rf $M70
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
