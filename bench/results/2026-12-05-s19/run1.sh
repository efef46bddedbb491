#!/usr/bin/env bash
# Session 19, run 1: where the decode attention's time goes (tree 72b71b7). Nsight Compute over
# the attention op alone (exl3-bench kernels, F16 cache): every attention launch's duration and
# DRAM throughput at 512 and 2048 keys, batch 1 / 4 / 32 (decode kernel and merge apart), then the
# full sections of the decode kernel at batch 1 and 32, 2048 keys.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
NCU=/usr/local/cuda/bin/ncu
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
M="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active,launch__waves_per_multiprocessor"
for ctx in 512 2048; do
  for rows in 1 4 32; do
    timeout 100 $NCU --clock-control none --kernel-name regex:attention --metrics $M --csv \
      $B/exl3-bench kernels --model /tmp/m8 --backend cuda --rows $rows --context $ctx --timing host --iters 2 \
      --warmup 1 > $R/ncu-ctx$ctx-b$rows.csv 2> $R/ncu-ctx$ctx-b$rows.log
    echo "ctx $ctx rows $rows rc $? at $SECONDS s" >> $S
    python3 - "$R/ncu-ctx$ctx-b$rows.csv" >> $S <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; data = rows[1:]
ki, mi, vi, ii = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value"), head.index("ID")
by = collections.OrderedDict()
for r in data:
    by.setdefault((r[ii], r[ki][:60]), {})[r[mi]] = r[vi]
for (i, k), m in list(by.items())[-4:]:
    print("  ", i, k, " ".join(f"{n.split('__')[1][:22]}={v}" for n, v in m.items()))
PY
  done
done
for rows in 1 32; do
  timeout 120 $NCU --clock-control none --kernel-name regex:attention_decode --launch-skip 2 --launch-count 1 --set full \
    $B/exl3-bench kernels --model /tmp/m8 --backend cuda --rows $rows --context 2048 --timing host --iters 2 \
    --warmup 1 > $R/ncu-full-b$rows.txt 2>&1
  echo "full b$rows rc $? at $SECONDS s" >> $S
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
