#!/usr/bin/env bash
# Session 17, run 3 (on run 2's warm machine and bundle, the command as it ran): 8B int8 auto at
# batch 1 and 2, four rounds of 64 steps, the tree of run 2 (the hand-off at 1-4 rows) against
# exl3-bench-nohandoff. Its output, as the tool returned it, is summary3.txt.
export LD_LIBRARY_PATH=/tmp/g/lib:/usr/local/cuda/lib64; B=/tmp/g/bin; [ -d /tmp/g/bin ] || { mkdir -p /tmp/g && tar -C /tmp/g -xJf .gpu/bundle.tar.xz; }; $B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > /dev/null 2>&1; for r in 1 2 3 4; do for v in exl3-bench-nohandoff exl3-bench; do $B/$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2 --decode-steps 64 --int8-activations auto 2>&1 | grep "decode batch" | sed "s/^/r$r $v /"; done; done; echo "done $SECONDS"
