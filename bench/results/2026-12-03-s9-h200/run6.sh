#!/usr/bin/env bash
# Session 9 on one H200, sixth run. base = ecaad6c (the RoPE change); n2 = the layer's RMSNorm
# fused into the matmul that reads it for 1-2 rows (Backend::norm_linears, norm_gate_up_silu: each
# block takes its rows' mean square and normalizes as it stages x; no RMSNorm launch). GPU tests of
# n2; the 8B model at batch 1, 2, 4 (int8 off and auto) and 32 (off), two rounds. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in backend_ops_gpu_test exl3_gemv_int8_gpu_test exl3_linear_gpu_test step_graph_gpu_test quantized_cache_model_gpu_test \
         llama_model_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
grep -E '^\[  FAILED  \]' $R/*.log | head -20 >> $S
M8=/tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
run() {  # variant model mode batches tag
  timeout 90 $B/exl3-bench-$1 model --model $2 --backend cuda --prefill 128 --prefill-repeats 1 --batch $4 \
    --decode-steps 16 --int8-activations $3 --json $R/model-$1-$3-$5.json --markdown $R/model-$1-$3-$5.md > $R/model-$1-$3-$5.log 2>&1
  echo "model $1 $3 $5 rc $?" >> $S; grep -E 'decode batch' $R/model-$1-$3-$5.log | sed "s/^/  $1 $3 /" >> $S
}
for round in a b; do
  for v in base n2; do run $v $M8 off 1,2,4,32 8b-$round; run $v $M8 auto 1,2,4 8b-$round; done
done
cp $S $R/; tar -C $OUT -cJf $OUT/results.tar.xz r
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
