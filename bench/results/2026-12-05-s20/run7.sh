#!/usr/bin/env bash
# Session 20, run 7: run 6's 4-bit cache was slower in the model than its op time says (an
# attention ~280 us a layer at batch 32 against the op's 143 at 2048 keys), as was the 8-bit cache
# at 4096 rows: a step graph's split plan is made for its page bucket's last position, so 4 splits
# of a padded context leave whole splits empty and the rest long. So the 4-bit cache in the model
# with 16384 rows (exl3-bench-q16kall: 16384 at every width) against the kept tree (4096 at 4/4),
# 2048- and 512-token prompts, int8 off, batch 1-64.
# Bundle: exl3-bench, exl3-bench-q16kall.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
cp $B/exl3-bench $B/exl3-bench-kept
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
m() {  # variant prompt tag
  timeout 90 $B/exl3-bench-$1 model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16,32,64 \
    --decode-prompt $2 --decode-steps 32 --int8-activations off --cache-bits 4 > $R/p$2-$1-$3.log 2>&1
  echo "8b p$2 off cache 4 $1 $3: $(grep -E 'decode batch' $R/p$2-$1-$3.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
}
m kept 2048 1
m q16kall 2048 1
m kept 512 1
m q16kall 512 1
m kept 2048 2
m q16kall 2048 2
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
