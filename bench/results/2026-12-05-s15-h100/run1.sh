#!/usr/bin/env bash
# Session 15 on one GPU (H100 or H200, whichever is lent): the one-shot all-reduce's kernel test
# after its two fixes, then session 13's prepared A/B against base (db0ae67): the fp16 few-rows
# kernel with 8-tile stages (exl3-bench-s8r3: 3 ring slots at K <= 4, 2 above; -s8r2: 2 at every
# K), decode attention with at least 256 keys a split (-attn256), and the int8 kernel's two-block
# stages taken wherever allowed at 1-2 rows (-wide; the planner now takes them only for the widest
# matrices). The s8r3 tree's GPU tests first. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader >> $S
t() {  # binary tag
  timeout 200 $B/$1 > $R/$1.log 2>&1; echo "$1 $2 rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$1.log | tr '\n' ' ')" >> $S
}
t oneshot_all_reduce_gpu_test base
for x in backend_ops_gpu_test exl3_linear_gpu_test step_graph_gpu_test; do t $x-s8r3 s8r3; done
g() {  # variant round
  timeout 120 $B/$1 gemv --bits 4 --codebooks mul1 --int8 --no-check --rows 1,2,8,32 \
    --shapes 4096x4096,4096x6144,4096x28672,14336x4096,8192x28672 \
    --json $R/gemv-$1-$2.json --markdown $R/gemv-$1-$2.md > $R/gemv-$1-$2.log 2>&1
  echo "gemv $1 $2 rc $?" >> $S
  grep -E '^\| linear-(int8|f16) ' $R/gemv-$1-$2.md | awk -F'|' -v v=$1 '{printf "  %s %s %s r%s %s Gw/ms %s us\n",v,$2,$3,$6,$9,$7}' >> $S
}
for r in 1 2; do for v in exl3-bench-base exl3-bench-s8r3 exl3-bench-s8r2 exl3-bench-wide; do g $v $r; done; done
ab() {  # variant mode batches tag [extra]
  timeout 150 $B/$1 model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 ${5:-} --json $R/ab-$4-$1-$2.json --markdown $R/ab-$4-$1-$2.md > $R/ab-$4-$1-$2.log 2>&1
  echo "ab $4 $1 $2 rc $?" >> $S; grep -E 'decode batch' $R/ab-$4-$1-$2.log | sed "s/^/  $4 $1 $2 /" >> $S
}
M8=/tmp/m8
$B/exl3-bench-base make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for r in 1 2 3; do
  for v in exl3-bench-base exl3-bench-s8r3 exl3-bench-s8r2; do ab $v off 1,4,8,16,32,64 8b$r; done
  for v in exl3-bench-base exl3-bench-wide exl3-bench-attn256; do ab $v auto 1,2,8 auto$r; done
done
for r in 1 2; do for v in exl3-bench-base exl3-bench-attn256; do ab $v auto 1,8 ctx512r$r "--decode-prompt 512"; done; done
for v in exl3-bench-base exl3-bench-attn256; do ab $v off 1,16 ctx2k "--decode-prompt 2048"; done
rm -rf $M8
M70=/tmp/m70
$B/exl3-bench-base make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $?" >> $S
for r in 1 2; do for v in exl3-bench-base exl3-bench-wide; do
  timeout 150 $B/$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2 --decode-steps 8 \
    --int8-activations auto --json $R/ab70-$v-$r.json > $R/ab70-$v-$r.log 2>&1
  echo "ab70 $v $r rc $?" >> $S; grep -E 'decode batch' $R/ab70-$v-$r.log | sed "s/^/  70b $v r$r /" >> $S
done; done
rm -rf $M70
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
