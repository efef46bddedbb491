#!/usr/bin/env bash
# Session 7 on one H200, third run. Binaries:
#   base: e5fbd7f; v1: two-block stages (1-2 rows, K <= 6) and cheaper partial stores (run2's v1)
#   v4a:  v1 + the planner counting 4 resident blocks as an SM's saturating load
#   v4b:  v4a with two-block stages at K <= 4 only
# The int8 linear on the 8B/70B matrices and the 8B lm_head (6 bits), K=2..8 on 8192x28672, the
# 8B model at batch 1 and 32, and one batch-1 decode step kernel by kernel (Nsight Compute) for
# base and v4a. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
for v in base v1 v4a v4b; do
  timeout 100 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --shapes 8192x28672,28672x8192,4096x28672,14336x4096,4096x6144,4096x4096 \
    --rows 1 --int8 --no-check --json $R/gemv4-$v.json --markdown $R/gemv4-$v.md > $R/gemv4-$v.log 2>&1
  timeout 100 $B/exl3-bench-$v gemv --bits 6 --codebooks mul1 --shapes 4096x128256,8192x128256 \
    --rows 1 --int8 --no-check --json $R/gemv6-$v.json --markdown $R/gemv6-$v.md > $R/gemv6-$v.log 2>&1
  echo "gemv $v" >> $S
  cat $R/gemv4-$v.md $R/gemv6-$v.md | grep -E '^\| linear-int8 ' | awk -v v=$v -F'|' '{printf "  %s %s K%s r%s %s us %s Gw/ms\n",v,$3,$4,$6,$7,$9}' >> $S
done
for v in v4a v4b; do
  timeout 100 $B/exl3-bench-$v gemv --bits 2,3,5,6,7,8 --codebooks mul1 --shapes 8192x28672 --rows 1 --int8 --no-check \
    --markdown $R/gemvk-$v.md > $R/gemvk-$v.log 2>&1
  grep -E '^\| linear-int8 ' $R/gemvk-$v.md | awk -v v=$v -F'|' '{printf "  %s %s K%s r%s %s us %s Gw/ms\n",v,$3,$4,$6,$7,$9}' >> $S
done
M8=/tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for v in base v4a v4b; do
  timeout 120 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --batch 1,32 --decode-steps 32 \
    --int8-activations auto --json $R/model-8b-$v.json --markdown $R/model-8b-$v.md > $R/model-8b-$v.log 2>&1
  echo "model 8b $v rc $?" >> $S; grep -E 'decode batch' $R/model-8b-$v.log | sed "s/^/  $v /" >> $S
done
for v in base v4a; do
  timeout 150 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 4300 --launch-count 900 \
    $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-steps 24 \
    --warmup 1 --int8-activations auto > $R/ncu-step-$v.csv 2> $R/ncu-step-$v.log; echo "ncu step $v rc $?" >> $S
done
cp $S $R/
tar -C $OUT -czf $OUT/results.tar.gz r && rm -rf $R
cat $S
