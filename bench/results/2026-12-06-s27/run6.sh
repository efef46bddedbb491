#!/usr/bin/env bash
# Session 27, run 6: L2 policies for the few-rows matmuls (run 5: at 32 rows the output passes
# reading the slices' partial products back are 25% of the 8B step's kernel time). l2f: the trellis
# streams' cp.async under an L2 evict-first policy (branch s27-l2-policy, first commit); l2fl: also
# the partial products stored under evict-last (its second commit). Against main 9932ac0, timing
# only (cache hints change no value): the linears at 1 and 32 rows on the 8B's shapes and 8192x28672; the 8B
# decode at batch 1, 4, 32 (int8 auto), two rounds; the 70B at batch 1 and 32.
# Bundle: exl3-bench-main, exl3-bench-l2f, exl3-bench-l2fl.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
V="main l2f l2fl"
for v in $V; do
  timeout 90 $B/exl3-bench-$v gemv --bits 4 --codebooks mul1 --rows 1,32 --no-check --linear-bits 0 --int8 \
    --shapes 8192x28672,4096x28672,14336x4096,4096x4096,4096x6144 --markdown $R/gemv-$v.md > $R/gemv-$v.log 2>&1
  echo "gemv $v rc $?: $(grep -E '^\| linear-' $R/gemv-$v.md | awk -F'|' '{printf "%s %s/%s %s  ", substr($2,9,4), $3, $6, $7}')" >> $S
done
M8=/tmp/m8; M70=/tmp/m70
[[ -d $M8 ]] || $B/exl3-bench-main make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b at $SECONDS s" >> $S
for r in 1 2; do for v in $V; do
  timeout 90 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,32 \
    --decode-steps 48 --int8-activations auto > $R/m8-$v-$r.log 2>&1
  echo "8b auto $v r$r rc $?: $(grep -E 'decode batch' $R/m8-$v-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done
$B/exl3-bench-main make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $? at $SECONDS s" >> $S
for v in $V; do
  timeout 90 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,32 \
    --decode-steps 24 --int8-activations auto > $R/m70-$v.log 2>&1
  echo "70b auto $v rc $?: $(grep -E 'decode batch' $R/m70-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done
rm -rf $M70
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
