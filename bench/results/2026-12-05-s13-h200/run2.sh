#!/usr/bin/env bash
# Session 13 on one H200, second run: the fp16 few-rows kernel with 8-tile stages (exl3-bench-s8r3:
# 3 ring slots at K <= 4, 2 above; exl3-bench-s8r2: 2 slots at every K) and decode attention with
# at least 256 keys a split (exl3-bench-attn256, F16 pages) against base (3820f11). The whole MUL1
# linear at 1, 8 and 32 rows, two rounds, and the fp16 linear at every K for s8r3; 8B decode with
# int8 off, two rounds; base and attn256 at 512-token (two rounds) and 2048-token contexts.
# The GPU tests of the s8r3 tree first. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in backend_ops_gpu_test exl3_linear_gpu_test step_graph_gpu_test; do  # built with s8r3's layout
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t (s8r3) rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
g() {  # variant round
  timeout 120 $B/$1 gemv --bits 4 --codebooks mul1 --int8 --no-check --rows 1,8,32 \
    --shapes 4096x4096,4096x6144,4096x28672,14336x4096,8192x28672 \
    --json $R/gemv-$1-$2.json --markdown $R/gemv-$1-$2.md > $R/gemv-$1-$2.log 2>&1
  echo "gemv $1 $2 rc $?" >> $S
  grep -E '^\| linear-(int8|f16) ' $R/gemv-$1-$2.md | awk -F'|' -v v=$1 '{printf "  %s %s %s r%s %s Gw/ms %s us\n",v,$2,$3,$6,$9,$7}' >> $S
}
for r in 1 2; do for v in exl3-bench-base exl3-bench-s8r3 exl3-bench-s8r2; do g $v $r; done; done
for v in exl3-bench-base exl3-bench-s8r3; do
  timeout 100 $B/$v gemv --bits 2,3,5,6,8 --codebooks mul1 --int8 --no-check --rows 1,32 --shapes 8192x28672 \
    --json $R/gemv-k-$v.json --markdown $R/gemv-k-$v.md > $R/gemv-k-$v.log 2>&1
  echo "gemv K sweep $v rc $?" >> $S
  grep -E '^\| linear-f16 ' $R/gemv-k-$v.md | awk -F'|' -v v=$v '{printf "  %s K%s %s %s r%s %s Gw/ms %s us\n",v,$4,$2,$3,$6,$9,$7}' >> $S
done
ab() {  # variant mode batches tag [extra]
  timeout 150 $B/$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 ${5:-} --json $R/ab-$4-$1-$2.json --markdown $R/ab-$4-$1-$2.md > $R/ab-$4-$1-$2.log 2>&1
  echo "ab $4 $1 $2 rc $?" >> $S; grep -E 'decode batch' $R/ab-$4-$1-$2.log | sed "s/^/  $4 $1 $2 /" >> $S
}
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for r in 1 2; do
  for v in exl3-bench-base exl3-bench-s8r3 exl3-bench-s8r2; do ab $v off 1,4,8,16,32,64 8b$r; done
  for v in exl3-bench-base exl3-bench-attn256; do ab $v auto 1,8 ctx512r$r "--decode-prompt 512"; done
done
for v in exl3-bench-base exl3-bench-attn256; do ab $v off 1,16 ctx2k "--decode-prompt 2048"; done
rm -rf $M8
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
