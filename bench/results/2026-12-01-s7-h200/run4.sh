#!/usr/bin/env bash
# Session 7 on one H200, fourth run. Binaries:
#   base: e5fbd7f; v4a: run3's (two-block stages always where allowed, saturating 4 blocks)
#   v5:   the planner chooses one- or two-block stages by its model (two-block stages price their
#         longer pipeline fill), int8 saturating at 4 blocks, grouped linears never get more
#         blocks than planned
# GPU tests (v5's tree), the int8 linear on 8B/70B matrices and lm_heads, K=2..8, the 8B model at
# batch 1 and 32, one decode step kernel by kernel for v5, the 70B model at batch 1. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_gemv_int8_gpu_test exl3_linear_gpu_test; do
  timeout 200 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
for v in base v4a v5; do
  timeout 100 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --shapes 8192x28672,28672x8192,8192x10240,8192x8192,4096x28672,14336x4096,4096x6144,4096x4096 \
    --rows 1 --int8 --json $R/gemv4-$v.json --markdown $R/gemv4-$v.md > $R/gemv4-$v.log 2>&1
  timeout 100 $B/exl3-bench-$v gemv --bits 6 --codebooks mul1 --shapes 4096x128256,8192x128256 \
    --rows 1 --int8 --no-check --json $R/gemv6-$v.json --markdown $R/gemv6-$v.md > $R/gemv6-$v.log 2>&1
  echo "gemv $v" >> $S
  cat $R/gemv4-$v.md $R/gemv6-$v.md | grep -E '^\| linear-int8 ' | awk -v v=$v -F'|' '{printf "  %s %s K%s r%s %s us %s Gw/ms\n",v,$3,$4,$6,$7,$9}' >> $S
done
timeout 150 $B/exl3-bench-v5 gemv --bits 2,3,4,5,6,7,8 --codebooks mul1 --shapes 8192x28672,28672x8192 --rows 1,2,4,8,16 --int8 --no-check \
  --json $R/gemvk-v5.json --markdown $R/gemvk-v5.md > $R/gemvk-v5.log 2>&1
grep -E '^\| linear-int8 .* 1 \|' $R/gemvk-v5.md | awk -F'|' '{printf "  v5 %s K%s r%s %s us %s Gw/ms\n",$3,$4,$6,$7,$9}' >> $S
M8=/tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for v in base v5; do
  timeout 120 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --batch 1,4,16,32 --decode-steps 32 \
    --int8-activations auto --json $R/model-8b-$v.json --markdown $R/model-8b-$v.md > $R/model-8b-$v.log 2>&1
  echo "model 8b $v rc $?" >> $S; grep -E 'decode batch' $R/model-8b-$v.log | sed "s/^/  $v /" >> $S
done
timeout 150 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 4300 --launch-count 900 \
  $B/exl3-bench-v5 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-steps 24 \
  --warmup 1 --int8-activations auto > $R/ncu-step-v5.csv 2> $R/ncu-step-v5.log; echo "ncu step v5 rc $?" >> $S
rm -rf $M8
M70=/tmp/m70
$B/exl3-bench-base make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $?" >> $S
for v in base v5; do
  timeout 150 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --batch 1,32 --decode-steps 16 \
    --int8-activations auto --json $R/model-70b-$v.json --markdown $R/model-70b-$v.md > $R/model-70b-$v.log 2>&1
  echo "model 70b $v rc $?" >> $S; grep -E 'decode batch' $R/model-70b-$v.log | sed "s/^/  $v /" >> $S
done
cp $S $R/
tar -C $OUT -czf $OUT/results.tar.gz r && rm -rf $R
cat $S
