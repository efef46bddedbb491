#!/usr/bin/env bash
# Session 33, run 2: run 1's bulk prefetch (cp.async.bulk.prefetch.L2) lost 18-33% at the 8B's
# batch 1. pfl asks L2 for the same bytes with one prefetch.global.L2 a 128-byte line instead
# (fire and forget, no bulk operation to complete). 8B int8 auto at batch 1 / 4 / 32, two rounds.
# Bundle: exl3-bench-main (main cba9b97), exl3-bench-pf (run 1's), exl3-bench-pfl.
set -u
. bench/device_run.sh
device_begin
L=pfl:EXL3_L2_PREFETCH_MB
device_model_rounds 2 "main $L=2 $L=4 $L=8 pf:EXL3_L2_PREFETCH_MB=2" 8b "1,4,32" 32
device_end
