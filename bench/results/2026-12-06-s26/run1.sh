#!/usr/bin/env bash
# Session 26, run 1: the int8 GEMV's fixed costs. Variants (exl3-bench-V, main 7eef708 plus one
# change each): pro, the prologue without the side tables' zeroing and the separate bias pass (one
# block barrier instead of three; branch s26-prologue); b5, one-group instances at 5 blocks an SM
# (48 registers, spilling a few words; the planner sees 5; branch s26-int8-b5); b5c1, b5 with one
# product chain (fewer spills). Two rounds of the int8 linear at 1-2 rows on the 70B's and 8B's
# shapes and of the 8B / 70B decode with int8 auto; pro's GPU tests; then where a batch-1 step goes
# now (Nsight Compute, step graphs off: every launch's time and grid) and, where Nsight Systems is
# installed, the same step inside its graph. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
M8=/tmp/m8; M70=/tmp/m70
$B/exl3-bench-main make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_gemv_int8_gpu_test backend_ops_gpu_test; do
  timeout 120 $B/$t-pro > $R/$t-pro.log 2>&1; echo "$t-pro rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t-pro.log | tr '\n' ' ') at $SECONDS s" >> $S
done
grep -h -B2 -A6 "Failure" $R/*_gpu_test-pro.log | head -30 >> $S
V="main pro b5 b5c1"
for r in 1 2; do
  for v in $V; do
    timeout 60 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --rows 1,2 --no-check --linear-bits 0 --int8 \
      --shapes 8192x28672,28672x8192,4096x28672,14336x4096,4096x4096,4096x6144 --markdown $R/gemv-$v-$r.md > $R/gemv-$v-$r.log 2>&1
    echo "gemv $v r$r rc $?: $(grep -E '^\| linear-int8' $R/gemv-$v-$r.md | awk -F'|' '{printf "%s/%s %s  ", $3, $6, $7}')" >> $S
    timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2,4 \
      --decode-steps 32 --int8-activations auto > $R/m8-$v-$r.log 2>&1
    echo "8b auto $v r$r rc $?: $(grep -E 'decode batch' $R/m8-$v-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
echo "ab done at $SECONDS s" >> $S
$B/exl3-bench-main make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $? at $SECONDS s" >> $S
for v in main pro b5; do
  timeout 60 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4 \
    --decode-steps 16 --int8-activations auto > $R/m70-$v.log 2>&1
  echo "70b auto $v rc $?: $(grep -E 'decode batch' $R/m70-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done
rm -rf $M70
echo "70b done at $SECONDS s" >> $S
NCU=/usr/local/cuda/bin/ncu
timeout 150 $NCU --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 3600 --launch-count 2600 \
  $B/exl3-bench-main model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-steps 8 \
  --warmup 1 --step-graphs off --int8-activations auto > $R/ncu-decode-b1.csv 2> $R/ncu-decode-b1.log
echo "ncu rc $? $(wc -l < $R/ncu-decode-b1.csv) lines at $SECONDS s" >> $S
python3 bench/ncu_step_breakdown.py $R/ncu-decode-b1.csv 3 >> $S 2>&1
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}" >> $S
if [[ -n $NSYS ]]; then
  timeout 120 $NSYS profile -t cuda --cuda-graph-trace=node -o $R/graph-b1 -f true $B/exl3-bench-main model --model $M8 \
    --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-steps 8 --warmup 1 --int8-activations auto \
    > $R/nsys.log 2>&1; echo "nsys rc $? at $SECONDS s" >> $S
  timeout 60 $NSYS stats -r cuda_gpu_trace -f csv -o $R/graph-b1 $R/graph-b1.nsys-rep > $R/nsys-stats.log 2>&1
  echo "nsys stats rc $? at $SECONDS s" >> $S; rm -f $R/graph-b1.nsys-rep $R/graph-b1.sqlite
fi
xz -9 $R/ncu-decode-b1.csv $R/*.csv 2>/dev/null
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
