#!/usr/bin/env bash
# Session 10 on one H200, eighth run: the final tree (rope3 = rope2 with the rope/cache epilogue an
# output-pass instance of its own, so the other epilogues' code is base's). GPU tests; one more A/B
# round against base (a69121a) at batch 1, 2, 4; then exl3-bench model on the 8B (int8 off: prefill
# 128/2048, batch 1-64; auto: batch 1-32), batch 1 at the serve run's context and exl3-bench serve
# with one client (off, auto), the int8 linear at K=2..8 on the 70B matrices, the 70B (auto,
# batch 1 and 32). Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in backend_ops_gpu_test step_graph_gpu_test quantized_cache_model_gpu_test llama_model_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
ab() {  # variant mode batches
  timeout 90 $B/$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/ab-$1-$2.json --markdown $R/ab-$1-$2.md > $R/ab-$1-$2.log 2>&1
  echo "ab $1 $2 rc $?" >> $S; grep -E 'decode batch' $R/ab-$1-$2.log | sed "s/^/  $1 $2 /" >> $S
}
for v in exl3-bench-base exl3-bench; do ab $v auto 1,2,4; ab $v off 1,2; done
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
  echo "serve 8b $i8 rc $?" >> $S; grep -iE 'clients|tokens/s' $R/serve-8b-$i8.md | head -4 | sed "s/^/  $i8 /" >> $S
done
rm -rf $M8
timeout 100 $B/exl3-bench gemv --bits 2,3,4,5,6,7,8 --codebooks mul1 --int8 --rows 1 --shapes 8192x28672,28672x8192 \
  --json $R/gemv-final.json --markdown $R/gemv-final.md > $R/gemv-final.log 2>&1
echo "gemv final rc $?" >> $S
grep -E '^\| linear-int8 ' $R/gemv-final.md | awk -F'|' '{printf "  %s K%s r%s %s Gw/ms\n",$3,$4,$6,$9}' >> $S
cp $S $R/; tar -C $OUT -cJf $OUT/results.tar.xz r
M70=/tmp/m70
$B/exl3-bench make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $?" >> $S
timeout 120 $B/exl3-bench model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,32 --decode-steps 16 \
  --int8-activations auto --json $R/model-70b-auto.json --markdown $R/model-70b-auto.md > $R/model-70b-auto.log 2>&1
echo "model 70b auto rc $?" >> $S; grep -E 'decode batch' $R/model-70b-auto.log | sed "s/^/  auto /" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
