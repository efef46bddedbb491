#!/usr/bin/env bash
# Session 20, run 3: run 2's bundle still on the machine, the quantized cache's split target at
# the other widths: 3, 2 and K4/V8, 4096 (exl3-bench, HEAD) against 16384 (exl3-bench-q16k), the
# attention op alone at 2048 and 8192 keys, batch 1-64. Run as one command line; this is it.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > /dev/null 2>&1
for ctx in 2048 8192; do for bits in 3 2 4,8; do for v in exl3-bench exl3-bench-q16k; do
  timeout 60 $B/$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16,32,64 --context $ctx --timing graph \
    --cache-bits $bits --markdown $OUT/k.md > /dev/null 2>&1
  echo "attention cache $bits ctx $ctx $v: $(grep -E '^\| attention' $OUT/k.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
done; done; done
rm $OUT/k.md; cat $S
