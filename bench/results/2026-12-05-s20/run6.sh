#!/usr/bin/env bash
# Session 20, run 6: exl3-bench model --cache-bits (new: the KV cache at exl3-launch's widths, its
# bytes counted at them) on the 8B at 2048-token prompts, int8 off, batch 1-64: an 8-bit cache
# with the split target kept (16384 at every width but 4/4) against exl3-bench-q4kall (4096 at
# every width, as before this session), two rounds; a 4-bit cache (4096 in both) once.
# Bundle: exl3-bench, exl3-bench-q4kall.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
cp $B/exl3-bench $B/exl3-bench-kept
$B/exl3-bench make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
m() {  # variant cache-bits tag
  timeout 90 $B/exl3-bench-$1 model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16,32,64 \
    --decode-prompt 2048 --decode-steps 32 --int8-activations off --cache-bits $2 --markdown $R/p2048-$1-k$2-$3.md \
    > $R/p2048-$1-k$2-$3.log 2>&1
  echo "8b p2048 off cache $2 $1 $3: $(grep -E 'decode batch' $R/p2048-$1-k$2-$3.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
}
for round in 1 2; do
  m q4kall 8 $round
  m kept 8 $round
done
m kept 4 1
grep -h "KV cache bits" $R/*.md | sort | uniq -c >> $S
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
