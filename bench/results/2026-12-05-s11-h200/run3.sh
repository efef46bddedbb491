#!/usr/bin/env bash
# Session 11 on one H200, third run: the tree to land (int8 input prestaged from 5 rows, int8 at
# most 8 rows; exl3-bench) and np (the same, but the planner prices partial products only past 8
# rows, as before for the int8 kernel) against base (fb9a858 + this session's gemv bench). GPU
# tests; the whole MUL1 linear at 1-8 rows; 8B decode at batch 1-8, two rounds; then the final
# figures: exl3-bench model (int8 off: prefill 128/2048, batch 1-64; auto: batch 1-32), batch 1 at
# the serve run's context and serve with one client (off, auto). Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export PATH=$B:$PATH EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_gemv_int8_gpu_test backend_ops_gpu_test step_graph_gpu_test exl3_linear_gpu_test \
  quantized_cache_model_gpu_test gemv_bench_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
for v in exl3-bench-base exl3-bench exl3-bench-np; do
  timeout 100 $B/$v gemv --bits 4 --codebooks mul1 --int8 --no-check --rows 1,2,4,5,6,8 \
    --shapes 4096x4096,4096x6144,4096x28672,14336x4096 --json $R/gemv-$v.json --markdown $R/gemv-$v.md > $R/gemv-$v.log 2>&1
  echo "gemv $v rc $?" >> $S
  grep -E '^\| linear-int8 ' $R/gemv-$v.md | awk -F'|' -v v=$v '{printf "  %s %s %s r%s %s Gw/ms %s us\n",v,$2,$3,$6,$9,$7}' >> $S
done
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
ab() {  # variant mode batches round
  timeout 90 $B/$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/ab-$1-$2-$4.json --markdown $R/ab-$1-$2-$4.md > $R/ab-$1-$2-$4.log 2>&1
  echo "ab $1 $2 rc $?" >> $S; grep -E 'decode batch' $R/ab-$1-$2-$4.log | sed "s/^/  $1 $2 /" >> $S
}
for round in a b; do
  for v in exl3-bench-base exl3-bench exl3-bench-np; do ab $v auto 1,2,4,5,6,8 $round; done
done
timeout 90 $B/exl3-bench model --model $M8 --backend cuda --prefill 128,2048 --prefill-repeats 2 --batch 1,4,8,16,32,64 \
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
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
