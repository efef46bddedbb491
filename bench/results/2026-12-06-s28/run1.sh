#!/usr/bin/env bash
# Session 28, run 1: session 27's prepared runs 9 and 10 in one call, plus a full Nsight Compute
# look at one decode layer's kernels at batch 1 and 32 (main). Variants: main; lu (branch s28-lu:
# the output passes read the partials with ld.global.lu); nodiv (s28-nodiv: warp_work's n-tile
# count from a quotient and remainder precomputed at launch); lunodiv (s28-lunodiv: both). GPU tests
# of lunodiv; the linears of main and nodiv at 1, 2 and 32 rows in two rounds; the 8B decode at
# batch 1, 4, 32 (int8 auto) in four alternating rounds, the 70B at batch 1 and 32 in two; then
# ncu --set full on the last dozen gemv/attention launches of a decode step (8B, batch 1 and 32).
# Bundle: exl3-bench-{main,lu,nodiv,lunodiv} and the five *_gpu_test binaries built from lunodiv.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_gemv_int8_gpu_test exl3_linear_gpu_test backend_ops_gpu_test step_graph_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ') at $SECONDS s" >> $S
done
timeout 200 $B/llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*TwoPointFive* > $R/llama_model_gpu_test.log 2>&1
echo "llama_model_gpu_test rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/llama_model_gpu_test.log | tr '\n' ' ') at $SECONDS s" >> $S
grep -h -B2 -A8 "Failure" $R/*_gpu_test.log | head -60 >> $S
for r in 1 2; do for v in main nodiv; do
  timeout 90 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --rows 1,2,32 --no-check --linear-bits 0 --int8 \
    --shapes 8192x28672,28672x8192,4096x28672,14336x4096,4096x4096,4096x6144 --markdown $R/gemv-$v-$r.md > $R/gemv-$v-$r.log 2>&1
  echo "gemv $v r$r rc $?: $(grep -E '^\| linear-' $R/gemv-$v-$r.md | awk -F'|' '{printf "%s %s/%s %s  ", substr($2,9,4), $3, $6, $7}')" >> $S
done; done
M8=/tmp/m8; M70=/tmp/m70
[[ -d $M8 ]] || $B/exl3-bench-main make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b at $SECONDS s" >> $S
for r in 1 2 3 4; do for v in main lu nodiv lunodiv; do
  timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,32 \
    --decode-steps 48 --int8-activations auto > $R/m8-$v-$r.log 2>&1
  echo "8b auto $v r$r rc $?: $(grep -E 'decode batch' $R/m8-$v-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done
[[ -d $M70 ]] || $B/exl3-bench-main make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b at $SECONDS s" >> $S
for r in 1 2; do for v in main lu nodiv lunodiv; do
  timeout 90 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,32 \
    --decode-steps 24 --int8-activations auto > $R/m70-$v-$r.log 2>&1
  echo "70b auto $v r$r rc $?: $(grep -E 'decode batch' $R/m70-$v-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done
NCU=/usr/local/cuda/bin/ncu
for b in 32 1; do
  run=($B/exl3-bench-main model --model $M8 --backend cuda --prefill 16 --prefill-repeats 1 --batch $b --decode-steps 2
       --warmup 1 --step-graphs off --int8-activations auto)
  n=$(timeout 120 $NCU --metrics gpu__time_duration.sum -k 'regex:gemv|attention' --csv "${run[@]}" 2>/dev/null | grep -c gpu__time_duration)
  timeout 150 $NCU --set full -k 'regex:gemv|attention' --launch-skip $((n - 24)) --launch-count 12 --export $R/ncu-b$b \
    "${run[@]}" > $R/ncu-b$b.log 2>&1
  echo "ncu b$b rc $? ($n matching launches) at $SECONDS s" >> $S
  $NCU --import $R/ncu-b$b.ncu-rep --page details --csv > $R/ncu-b$b-details.csv 2>> $R/ncu-b$b.log
  $NCU --import $R/ncu-b$b.ncu-rep --page raw --csv > $R/ncu-b$b-raw.csv 2>> $R/ncu-b$b.log
  rm -f $R/ncu-b$b.ncu-rep
done
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
