#!/usr/bin/env bash
# Session 32, run 2: on an H200, main's targets 1-3 (session 29's run-h200-targets.sh: the README's
# H200 column dates from sessions 10-12); on an H100, where a batch-1 and a batch-32 step of the
# 8B go today (Nsight Compute, as session 28's run 5, which predates sessions 29-31). Bundle:
# exl3-bench-main (main a0d1f65).
set -u
. bench/device_run.sh
device_begin
if ! device_h200_targets main; then
  device_step_breakdown main 8b 1
  device_step_breakdown main 8b 32
fi
device_end
