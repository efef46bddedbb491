#!/usr/bin/env bash
# Session 26, run 2: on an H200, every target's figure with the landed tree (main 7eef708: session
# 22's run 1, PART=targets, the commands of session 25's run 4); on any GPU, Nsight Compute's full
# sections and SASS source page for the one-row int8 linear on the 8B's small shapes (4096x4096,
# 4096x6144, where a launch's fixed cost is half its time), and pro against main once more.
# Bundle: exl3-bench, exl3-launch, exl3-coordinator, exl3-worker (main), exl3-bench-pro.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
NCU=/usr/local/cuda/bin/ncu
for shape in 4096x4096 4096x6144; do
  timeout 120 $NCU --set full --import-source no --kernel-name regex:exl3_gemv_int8_kernel --launch-skip 2 --launch-count 1 \
    --csv --page details $B/exl3-bench gemv --bits 4 --codebooks mul1 --rows 1 --no-check --linear-bits 0 --int8 \
    --shapes $shape --iters 4 --repeats 1 > $R/ncu-$shape-details.csv 2> $R/ncu-$shape.log
  echo "ncu $shape rc $? at $SECONDS s" >> $S
  grep -E '"(Duration|SM Active Cycles|Elapsed Cycles|Achieved Occupancy|Executed Instructions|Issued Ipc Active|Memory Throughput)"' \
    $R/ncu-$shape-details.csv | awk -F'","' '{print "  " $13 " " $15}' >> $S
done
for r in 1 2; do for v in main pro; do
  bin=$B/exl3-bench; [[ $v == pro ]] && bin=$B/exl3-bench-pro
  timeout 60 $bin gemv --bits 4 --codebooks mul1 --rows 1,2 --no-check --linear-bits 0 --int8 \
    --shapes 8192x28672,28672x8192,4096x4096,4096x6144 --markdown $R/gemv-$v-$r.md > $R/gemv-$v-$r.log 2>&1
  echo "gemv $v r$r rc $?: $(grep -E '^\| linear-int8' $R/gemv-$v-$r.md | awk -F'|' '{printf "%s/%s %s  ", $3, $6, $7}')" >> $S
done; done
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  OUT=$OUT/targets; mkdir -p $OUT
  PART=targets bash bench/results/2026-12-05-s22/run1.sh > /dev/null 2>&1
  echo "targets at $SECONDS s" >> $S; cat $OUT/summary.txt >> $S
fi
cat $S
