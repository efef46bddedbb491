#!/usr/bin/env bash
# Session 15, second run (one GPU): run 1's winner made a rule, 8-tile stages in 2 ring slots up to
# K = 4 (exl3-bench-s8k4; 4-tile stages as before from K = 5), against base (db0ae67) at K = 2-4
# (MUL1 and 3INST) and in the 8B/70B models, with its tree's GPU tests; and the int8 kernel with 4
# ring slots at K <= 4 for one-block stages (exl3-bench-i8s4, on s8k4; 3 before), and the int8
# kernel's two-block stages never taken (exl3-bench-narrow, on s8k4; the planner takes them for the
# widest matrices). An 8B at 2.5 bpw (K = 2 and 3) too. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader >> $S
t() {  # binary tag [args]
  timeout 200 $B/$1 ${3:-} > $R/$1.log 2>&1; echo "$1 $2 rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$1.log | tr '\n' ' ')" >> $S
}
for x in backend_ops_gpu_test exl3_linear_gpu_test step_graph_gpu_test gemv_bench_gpu_test exl3_gemv_int8_gpu_test; do t $x-s8k4 s8k4; done
t llama_model_gpu_test-s8k4 s8k4 "--gtest_filter=-*HfBf16*:*Perplexity*"  # those read shared/, not on this machine
t exl3_gemv_int8_gpu_test-i8s4 i8s4
g() {  # variant round
  timeout 120 $B/$1 gemv --bits 2,3,4 --codebooks mul1,3inst --int8 --no-check --rows 1,2,8,32 \
    --shapes 4096x4096,4096x28672,8192x28672 --json $R/gemv-$1-$2.json --markdown $R/gemv-$1-$2.md > $R/gemv-$1-$2.log 2>&1
  echo "gemv $1 $2 rc $?" >> $S
  grep -E '^\| linear-(int8|f16) ' $R/gemv-$1-$2.md | awk -F'|' -v v=$1 '{printf "  %s %s %s K%s %s r%s %s Gw/ms %s us\n",v,$2,$3,$4,$5,$6,$9,$7}' >> $S
}
for r in 1 2; do for v in exl3-bench-base exl3-bench-s8k4 exl3-bench-i8s4; do g $v $r; done; done
ab() {  # variant mode batches tag model [extra]
  timeout 150 $B/$1 model --model $5 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 ${6:-} --json $R/ab-$4-$1-$2.json --markdown $R/ab-$4-$1-$2.md > $R/ab-$4-$1-$2.log 2>&1
  echo "ab $4 $1 $2 rc $?" >> $S; grep -E 'decode batch' $R/ab-$4-$1-$2.log | sed "s/^/  $4 $1 $2 /" >> $S
}
M8=/tmp/m8; M25=/tmp/m25
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
$B/exl3-bench-base make-model --shape llama-3.1-8b --bpw 2.5 --out $M25 > $R/make-8b25.log 2>&1; echo "make 8b 2.5 rc $?" >> $S
for r in 1 2 3; do
  for v in exl3-bench-base exl3-bench-s8k4 exl3-bench-i8s4; do
    ab $v off 1,4,16,32,64 8b$r $M8
    ab $v auto 1,2,4,8 8b$r $M8
  done
  ab exl3-bench-narrow auto 1,2 8b$r $M8
done
for r in 1 2; do for v in exl3-bench-base exl3-bench-s8k4; do ab $v off 1,16,32 8b25-$r $M25; done; done
rm -rf $M25
M70=/tmp/m70
$B/exl3-bench-base make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $?" >> $S
for r in 1 2; do for v in exl3-bench-base exl3-bench-s8k4 exl3-bench-i8s4; do
  ab $v auto 1,32 70b$r $M70
  ab $v off 1 70b$r $M70
done; ab exl3-bench-narrow auto 1 70b$r $M70; done
rm -rf $M70
# Where a batch-1 step goes now: every kernel's time under Nsight Compute (step graphs off, so
# each launch is its own; the decode steps are the launches after the prefill's).
timeout 150 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 4000 \
  $B/exl3-bench-s8k4 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-steps 3 \
  --warmup 1 --step-graphs off --int8-activations auto > $R/ncu-decode-b1.csv 2> $R/ncu-decode-b1.log
echo "ncu b1 rc $? $(wc -l < $R/ncu-decode-b1.csv) lines" >> $S
rm -rf $M8
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
