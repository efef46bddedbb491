#!/usr/bin/env bash
# Session 31, run 2: why the one-row int8 launch that finishes its own outputs block by block
# (ownblk) takes 27.5 us against main's 18.2 (run 1's Nsight breakdown): Nsight Compute's full
# sections for one such launch of each build in the 8B decode at batch 1 (a decode step's launch,
# past the prefill's and the warm-up's; bench/device_run.sh's device_one_row_sections). Bundle:
# run 1's.
set -u
. bench/device_run.sh
device_begin
for v in main ownblk own; do
  device_one_row_sections "$v"
done
device_end
