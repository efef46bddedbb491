#!/usr/bin/env bash
# Session 29, run 2 (the same warm machine right after run 1, its bundle and models): more rounds
# at one row, where run 1 left one and bias apart by less than the noise: the 70B at batch 1 in
# three alternating rounds, the 8B at batch 1 in four.
set -u
. bench/device_run.sh
device_begin
device_model_rounds 3 "one bias main" 70b "1" 16
device_model_rounds 4 "one bias main" 8b "1" 32
device_end
