#!/usr/bin/env bash
# Session 32, run 1 (session 31's run 4 with the branches rebuilt): every own-output build ran the
# 8B at batch 4 3-4% faster than main, where its path does not run. Is the gain the memory
# layout's? pad4k and pad4m (branch s32-layout-pad) are main plus one allocation (4 KiB, 4 MiB)
# made in the CUDA backend's scratch reservation before the attention scratch, as the own
# branches' counters were. Three rounds at batches 1, 4, 8, 32. On an H200, then main's targets
# 1-3 (session 29's run-h200-targets.sh): the README's H200 column dates from sessions 10-12.
# Bundle: exl3-bench-main (main a0d1f65), exl3-bench-pad4k, exl3-bench-pad4m.
set -u
. bench/device_run.sh
device_begin
device_model_rounds 3 "main pad4k pad4m" 8b "1,4,8,32" 32
device_h200_targets main
# Where a batch-4 step's kernel time goes in main and pad4k, if pad4k's mean at batch 4 is 2% or
# more above main's (the second figure of each round's line).
b4_mean() {
  grep -E "^8b auto $1 r[0-9]+ rc 0:" "$S" | awk '{s += $8; n++} END {if (n) printf "%.1f", s / n; else print 0}'
}
if awk -v a="$(b4_mean pad4k)" -v b="$(b4_mean main)" 'BEGIN {exit !(b > 0 && a >= 1.02 * b)}'; then
  device_step_breakdown main 8b 4
  device_step_breakdown pad4k 8b 4
fi
device_end
