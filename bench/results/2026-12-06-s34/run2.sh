#!/usr/bin/env bash
# Session 34, run 2 (the same warm H100 right after run 1; run 1's bundle): more rounds of the
# per-line prefetch (pfl) at small caps, the 8B at batch 1 / 4 (48 steps, three rounds), and the
# 70B at batch 1 / 32 with 4 and 8 MiB (two rounds).
set -u
. bench/device_run.sh
device_begin
L=pfl:EXL3_L2_PREFETCH_MB
device_model_rounds 3 "main $L=1 $L=2 $L=4" 8b "1,4" 48
device_model_rounds 2 "main $L=4 $L=8" 70b "1,32" 16
device_end
