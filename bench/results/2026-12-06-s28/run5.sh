#!/usr/bin/env bash
# Session 28, run 5: main after the session (lu and the cluster fences merged) for the record, and
# the first run of the shared steps in bench/device_run.sh: the 8B decode at batch 1, 4, 16, 32 in
# two rounds, the 70B at batch 1 and 32 in one, and where a decode step's kernel time goes at batch
# 1 and 32 (Nsight Compute, every launch, real clocks). Bundle: exl3-bench-main (main 728bfde's
# code).
set -u
. bench/device_run.sh
device_begin
device_model_rounds 2 main 8b "1,4,16,32" 48
device_model_rounds 1 main 70b "1,32" 24
device_step_breakdown main 8b 1
device_step_breakdown main 8b 32
device_end
