#!/usr/bin/env bash
# Session 31, run 4: every own-output build (s30 own and ownblk, s31 lean) ran the 8B at batch 4
# 3-4% faster than main, where its path does not run. alloc (branch s31-alloc-only) is main with
# only their counters' allocation in the CUDA backend's scratch reservation (which moves the
# attention scratch after it): is the gain the memory layout's? Batches 1, 4, 8, 32.
# Bundle: exl3-bench-main, exl3-bench-alloc, exl3-bench-lean.
set -u
. bench/device_run.sh
device_begin
device_model_rounds 3 "main alloc lean" 8b "1,4,8,32" 32
device_end
