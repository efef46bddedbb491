#!/usr/bin/env bash
# Session 34, run 4 (the warm H100 of run 3, its bundle): three more rounds of run 3's 8B rounds at
# batch 1 / 4, the change first. (Its kernels-mode lines passed a flag that does not exist,
# --attention-context; run 5 has the right one, --context.)
set -u
. bench/device_run.sh
device_begin
device_model_rounds 3 "units main" 8b "1,4" 48
device_end
