#!/usr/bin/env bash
# Session 31, run 2: why the one-row int8 launch that finishes its own outputs block by block
# (ownblk) takes 27.5 us against main's 18.2 (run 1's Nsight breakdown): Nsight Compute's full
# sections for one such launch of each build in the 8B decode at batch 1 (a decode step's launch,
# past the prefill's and the warm-up's). Bundle: run 1's.
set -u
. bench/device_run.sh
device_begin
device_model 8b
for v in main ownblk own; do
  timeout 150 /usr/local/cuda/bin/ncu --clock-control none --kernel-name-base demangled \
    --kernel-name "regex:exl3_gemv_int8_kernel<\\(int\\)4, \\(int\\)1, \\(bool\\)0, \\(bool\\)1>" --launch-skip 300 --launch-count 2 --set full \
    "$B/exl3-bench-$v" model --model /tmp/m8b --backend cuda --prefill 16 --prefill-repeats 1 --batch 1 \
    --decode-steps 8 --warmup 1 --step-graphs off --int8-activations auto > "$R/ncu-full-$v.txt" 2>&1
  echo "ncu full $v rc $? at $SECONDS s" >> "$S"
  grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Memory Throughput|Local Memory|Stack Size|Waves Per SM|Grid Size|Dynamic Shared|Executed Ipc A|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" "$R/ncu-full-$v.txt" | head -40 >> "$S"
done
device_end
