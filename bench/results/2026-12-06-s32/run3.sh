#!/usr/bin/env bash
# Session 32, run 3: even slices. At 32 rows the fp16 matmul's plans leave a short last k-slice
# (the 8B's gate/up 5 slices of 7 groups with 4 in the last, down 23 of 5 with 2, o 11 of 3 with
# 2), whose blocks finish early while the SMs' other blocks run on. even (branch
# s32-even-slices) takes only slice lengths that divide k where the plan prices partial products
# (fp16, 8+ rows): 8B gate/up 8 x 4 groups, down 28 x 4, o 8 x 4. Alternating rounds, int8 auto
# (fp16 from 9 rows). Bundle: exl3-bench-main (main a0d1f65), exl3-bench-even.
set -u
. bench/device_run.sh
device_begin
device_model_rounds 3 "main even" 8b "16,32" 32
device_model_rounds 2 "main even" 70b "32" 16
device_end
