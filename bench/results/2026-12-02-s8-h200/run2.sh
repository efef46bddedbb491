#!/usr/bin/env bash
# Session 8 on one H200, second run. Binaries (exl3-bench-<v>):
#   base: ed0d4f2
#   p1: rms_norm, rope_kv_write, attention decode and merge as dependent launches; the output pass
#       reads svh and bias before its wait; the embedding with 16 loads in flight a thread
#   p2: p1 + the planner charging every slice its partial products' memory traffic
#   p3: p2 + 17-32 rows (two m-blocks) staging A in what their 3 resident blocks leave (74 KiB)
# GPU tests of p3's tree; the 8B model (int8 off: batch 1-64; auto: batch 1, 4, 16) for each; a
# batch-32 decode step kernel by kernel (p3); the details and SASS of run 1's Nsight Compute report;
# the 70B model at batch 1 and 32 (base, p3). Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in backend_ops_gpu_test cuda_ops_gpu_test step_graph_gpu_test exl3_linear_gpu_test exl3_gemv_int8_gpu_test \
         llama_model_gpu_test quantized_cache_model_gpu_test kv_quant_gpu_test; do
  timeout 120 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
M8=/tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for v in base p1 p2 p3; do
  timeout 80 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16,32,64 \
    --decode-steps 16 --int8-activations off --json $R/model-8b-off-$v.json --markdown $R/model-8b-off-$v.md > $R/model-8b-off-$v.log 2>&1
  echo "model 8b off $v rc $?" >> $S; grep -E 'decode batch' $R/model-8b-off-$v.log | sed "s/^/  $v /" >> $S
done
for v in base p1 p3; do
  timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16 \
    --decode-steps 16 --int8-activations auto --json $R/model-8b-auto-$v.json --markdown $R/model-8b-auto-$v.md > $R/model-8b-auto-$v.log 2>&1
  echo "model 8b auto $v rc $?" >> $S; grep -E 'decode batch' $R/model-8b-auto-$v.log | sed "s/^/  $v /" >> $S
done
NCU=/usr/local/cuda/bin/ncu
timeout 200 $NCU --clock-control none --metrics gpu__time_duration.sum --csv \
  $B/exl3-bench-p3 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 32 --decode-steps 2 \
  --warmup 0 --int8-activations off > $R/ncu-step32-p3.csv 2> $R/ncu-step32-p3.log; echo "ncu step32 p3 rc $?" >> $S
xz -dc .gpu/gemv32-v1.ncu-rep.xz > /tmp/gemv32-v1.ncu-rep
$NCU -i /tmp/gemv32-v1.ncu-rep --page details --csv > $R/gemv32-v1-details.csv 2>&1; echo "details rc $?" >> $S
$NCU -i /tmp/gemv32-v1.ncu-rep --page source --csv --print-source sass > $R/gemv32-v1-sass.csv 2>&1; echo "sass rc $?" >> $S
rm -rf $M8
cp $S $R/; tar -C $OUT -cJf $OUT/results.tar.xz r
M70=/tmp/m70
$B/exl3-bench-base make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $?" >> $S
for v in base p3; do
  timeout 100 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,32 --decode-steps 16 \
    --int8-activations auto --json $R/model-70b-auto-$v.json --markdown $R/model-70b-auto-$v.md > $R/model-70b-auto-$v.log 2>&1
  echo "model 70b auto $v rc $?" >> $S; grep -E 'decode batch' $R/model-70b-auto-$v.log | sed "s/^/  $v /" >> $S
done
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
