#!/usr/bin/env bash
# Session 9 on one H200, fifth run. base = 13469c1; r1 = RoPE + cache write with a thread's first
# values loaded with the token's metadata (no cos/sin table, no block barrier). GPU tests of r1;
# the 8B model at batch 1 and 32 (int8 off) and batch 1 (auto), three rounds; one batch-1 step
# kernel by kernel (r1). Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in backend_ops_gpu_test kv_quant_gpu_test step_graph_gpu_test quantized_cache_model_gpu_test llama_model_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
grep -E '^\[  FAILED  \]' $R/*.log | head -20 >> $S
M8=/tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
run() {  # variant mode batches tag
  timeout 60 $B/exl3-bench-$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/model-$1-$2-$4.json --markdown $R/model-$1-$2-$4.md > $R/model-$1-$2-$4.log 2>&1
  echo "model $1 $2 $4 rc $?" >> $S; grep -E 'decode batch' $R/model-$1-$2-$4.log | sed "s/^/  $1 $2 /" >> $S
}
for round in a b c; do
  for v in base r1; do run $v off 1,32 $round; run $v auto 1 $round; done
done
cp $S $R/; tar -C $OUT -cJf $OUT/results.tar.xz r
timeout 200 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv $B/exl3-bench-r1 model \
  --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-steps 2 --warmup 0 --int8-activations off \
  > $R/ncu-step1-r1.csv 2> $R/ncu-step1-r1.log; echo "ncu step1 rc $?" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
