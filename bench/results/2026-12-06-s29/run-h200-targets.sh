#!/usr/bin/env bash
# Session 29, run 2 (for an H200, whose figures in the README's target table date from sessions
# 10-12): targets 1-3 for one build, exl3-bench-$V (V=main unless set), in the commands of session
# 22's target part (bench/device_run.sh's device_target_*): the linears at 1 row, K = 2..8 (70B
# matrices, int8 and fp16 activations); the 8B decode with int8 auto (batch 1, 4, 8) and off
# (1-64) in two rounds; the 70B at batch 1 and 32 (auto). Bundle: run 1's.
set -u
. bench/device_run.sh
V=${V:-main}
device_begin
echo "variant $V" >> $S
device_target_linears "$V"
device_target_8b "$V" 2
device_target_70b "$V" 2
device_end
