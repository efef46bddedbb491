#!/usr/bin/env bash
# Session 7 on one H200, fifth run. Binaries: base (e5fbd7f), v5 (717a1f3), v6 (v5 + the trellis
# ring's chunk addresses as 32-bit word offsets: one add a chunk a stage instead of a 64-bit add
# and a copy). GPU tests of v6's tree; the int8 and fp16 few-rows linears (K=2..8 on the 70B
# matrices, the 8B matrices); the 8B model at batch 1..32 with int8 auto and off; the 70B model.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_gemv_int8_gpu_test exl3_linear_gpu_test backend_ops_gpu_test cuda_ops_gpu_test step_graph_gpu_test gemv_bench_gpu_test; do
  timeout 200 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
for v in base v5 v6; do
  timeout 120 $B/exl3-bench-$v gemv --bits 2,3,4,5,6,7,8 --codebooks mul1 --shapes 8192x28672,28672x8192 --rows 1 --int8 \
    --json $R/gemvk-$v.json --markdown $R/gemvk-$v.md > $R/gemvk-$v.log 2>&1
  timeout 100 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --shapes 8192x10240,8192x8192,4096x28672,14336x4096,4096x6144,4096x4096 \
    --rows 1,4,8,16 --int8 --no-check --json $R/gemv8b-$v.json --markdown $R/gemv8b-$v.md > $R/gemv8b-$v.log 2>&1
  echo "gemv $v" >> $S
  cat $R/gemvk-$v.md $R/gemv8b-$v.md | grep -E '^\| (linear-int8|gemm) .* 1 \|' | awk -v v=$v -F'|' '{printf "  %s %s %s K%s r%s %s us %s Gw/ms\n",v,$2,$3,$4,$6,$7,$9}' >> $S
done
M8=/tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for v in v5 v6; do
  for i8 in auto off; do
    timeout 120 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128,2048 --batch 1,4,16,32 --decode-steps 32 \
      --int8-activations $i8 --json $R/model-8b-$i8-$v.json --markdown $R/model-8b-$i8-$v.md > $R/model-8b-$i8-$v.log 2>&1
    echo "model 8b $i8 $v rc $?" >> $S; grep -E 'decode batch|prefill' $R/model-8b-$i8-$v.log | sed "s/^/  $v $i8 /" >> $S
  done
done
rm -rf $M8
M70=/tmp/m70
$B/exl3-bench-base make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $?" >> $S
for v in v6; do
  timeout 150 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --batch 1,32 --decode-steps 16 \
    --int8-activations auto --json $R/model-70b-auto-$v.json --markdown $R/model-70b-auto-$v.md > $R/model-70b-auto-$v.log 2>&1
  echo "model 70b $v rc $?" >> $S; grep -E 'decode batch' $R/model-70b-auto-$v.log | sed "s/^/  $v /" >> $S
done
cp $S $R/
tar -C $OUT -czf $OUT/results.tar.gz r && rm -rf $R
cat $S
