#!/usr/bin/env bash
# Session 30, run 2 (same machine as run 1): the 70B at batch 1 and 32 (int8 auto), two rounds.
set -u
. bench/device_run.sh
device_begin
V=main
device_model 70b
for r in 1 2; do
  log=$R/model-70b-auto-$r.log
  timeout 150 $B/exl3-bench-$V model --model /tmp/m70b --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,32 \
    --decode-steps 16 --int8-activations auto --json $R/model-70b-auto-$r.json --markdown $R/model-70b-auto-$r.md > $log 2>&1
  echo "model 70b auto r$r rc $? at $SECONDS s" >> $S; grep -E '^\| [0-9]+ \| [0-9]+ \|' $R/model-70b-auto-$r.md | sed "s/^/  auto /" >> $S
done
device_end
