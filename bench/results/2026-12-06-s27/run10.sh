#!/usr/bin/env bash
# Session 27, run 10 (prepared, not run: the device time was spent): nodiv (branch s27-nodiv), the
# few-rows matmuls' warp_work without its 64-bit division (a warp's n-tile count from a quotient
# and remainder precomputed at launch; the n-tiles stay interleaved as on main), against main: run
# 3 measured two 32-bit divisions there 1.5-2% on the int8 one-row linears. nodiv's GPU tests,
# then the linears at 1, 2 and 32 rows and the 8B decode at batch 1, 2, 4, 32 (int8 auto) in three
# alternating rounds, the 70B at batch 1 in two. Bundle: exl3-bench-main (main), exl3-bench-nodiv
# and the three *_gpu_test binaries built from s27-nodiv.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_gemv_int8_gpu_test exl3_linear_gpu_test backend_ops_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ') at $SECONDS s" >> $S
done
grep -h -B2 -A8 "Failure" $R/*_gpu_test.log | head -60 >> $S
for r in 1 2; do for v in main nodiv; do
  timeout 90 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --rows 1,2,32 --no-check --linear-bits 0 --int8 \
    --shapes 8192x28672,28672x8192,4096x28672,14336x4096,4096x4096,4096x6144 --markdown $R/gemv-$v-$r.md > $R/gemv-$v-$r.log 2>&1
  echo "gemv $v r$r rc $?: $(grep -E '^\| linear-' $R/gemv-$v-$r.md | awk -F'|' '{printf "%s %s/%s %s  ", substr($2,9,4), $3, $6, $7}')" >> $S
done; done
M8=/tmp/m8; M70=/tmp/m70
[[ -d $M8 ]] || $B/exl3-bench-main make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b at $SECONDS s" >> $S
for r in 1 2 3; do for v in main nodiv; do
  timeout 90 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2,4,32 \
    --decode-steps 48 --int8-activations auto > $R/m8-$v-$r.log 2>&1
  echo "8b auto $v r$r rc $?: $(grep -E 'decode batch' $R/m8-$v-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done
[[ -d $M70 ]] || $B/exl3-bench-main make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b at $SECONDS s" >> $S
for v in main nodiv main nodiv; do
  timeout 90 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 \
    --decode-steps 24 --int8-activations auto > $R/m70-$v.log 2>&1
  echo "70b auto $v rc $?: $(grep -E 'decode batch' $R/m70-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
