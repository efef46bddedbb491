#!/usr/bin/env bash
# Session 9 on one H200, second run. Binaries: base = 13469c1; f8 = the few-rows matmul finishing
# its outputs itself up to 8 rows (group counters; no output pass). GPU tests of f8; the int8
# linear at 1 row (K=4, 70B matrices) for both; the 8B model at batch 1-16 for both (int8 off and
# auto); a batch-1 step kernel by kernel (f8, off); the GEMV launches of one layer at batch 32 with
# Nsight Compute's full set (base). Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_linear_gpu_test exl3_gemv_int8_gpu_test backend_ops_gpu_test step_graph_gpu_test cuda_allocation_gpu_test \
         quantized_cache_model_gpu_test llama_model_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
grep -E '^\[  FAILED  \]' $R/*.log | head -20 >> $S
for v in base f8; do
  timeout 60 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --shapes 8192x28672,28672x8192 --rows 1 --int8 \
    --no-check --json $R/gemv-$v.json --markdown $R/gemv-$v.md > $R/gemv-$v.log 2>&1; echo "gemv $v rc $?" >> $S
  grep -E '^\| linear-int8 ' $R/gemv-$v.md | awk -F'|' -v v=$v '{printf "  %s %s K%s r%s %s us %s Gw/ms\n",v,$3,$4,$6,$7,$9}' >> $S
done
M8=/tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for round in 1; do
for v in base f8; do
  for mode in off auto; do
    timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2,4,8,16 \
      --decode-steps 16 --int8-activations $mode --json $R/model-8b-$mode-$v-$round.json --markdown $R/model-8b-$mode-$v-$round.md \
      > $R/model-8b-$mode-$v-$round.log 2>&1
    echo "model 8b $mode $v round $round rc $?" >> $S; grep -E 'decode batch' $R/model-8b-$mode-$v-$round.log | sed "s/^/  $mode $v /" >> $S
  done
done
done
NCU="/usr/local/cuda/bin/ncu"
timeout 200 $NCU --clock-control none --metrics gpu__time_duration.sum --csv $B/exl3-bench-f8 model --model $M8 --backend cuda \
  --prefill 128 --prefill-repeats 1 --batch 1 --decode-steps 2 --warmup 0 --int8-activations off \
  > $R/ncu-step1-f8.csv 2> $R/ncu-step1-f8.log; echo "ncu step1 rc $?" >> $S
cp $S $R/; tar -C $OUT -cJf $OUT/results.tar.xz r
timeout 200 $NCU --clock-control none --set full --kernel-name regex:'exl3_gemv_kernel' --launch-skip 200 --launch-count 4 \
  -o $R/gemv32 $B/exl3-bench-base model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 32 --warmup 0 \
  --int8-activations off --decode-steps 4 > $R/ncu-gemv32.log 2>&1; echo "ncu gemv32 rc $?" >> $S
$NCU -i $R/gemv32.ncu-rep --page details --csv > $R/gemv32-details.csv 2>&1
$NCU -i $R/gemv32.ncu-rep --page source --csv --print-source sass > $R/gemv32-sass.csv 2>&1; echo "sass rc $?" >> $S
rm -f $R/gemv32.ncu-rep
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
