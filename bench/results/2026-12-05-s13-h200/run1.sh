#!/usr/bin/env bash
# Session 13 on one H200, first run: the few-rows matmuls' trellis rings fed by the tensor memory
# accelerator (exl3-bench = the TMA tree, the int8 and the fp16 kernel, not kept: README.md;
# exl3-bench-tma5 = the same with the int8 kernel at 5 resident blocks and 2 ring slots) against
# base (3820f11). GPU tests of the TMA tree first; then the whole MUL1 linear (int8 and fp16
# activations) at 1, 8 and 32 rows on the 8B's and 70B's matrices (and a wider n, for the fixed cost
# per launch), two rounds; 8B decode with int8 auto (int8 to 8 rows, fp16 above), two rounds; 70B
# decode batch 1. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >> $S
for t in exl3_gemv_int8_gpu_test exl3_linear_gpu_test backend_ops_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
g() {  # variant round
  timeout 120 $B/$1 gemv --bits 4 --codebooks mul1 --int8 --no-check --rows 1,8,32 \
    --shapes 4096x4096,4096x6144,4096x28672,14336x4096,8192x28672,8192x114688,28672x8192 \
    --json $R/gemv-$1-$2.json --markdown $R/gemv-$1-$2.md > $R/gemv-$1-$2.log 2>&1
  echo "gemv $1 $2 rc $?" >> $S
  grep -E '^\| linear-(int8|f16) ' $R/gemv-$1-$2.md | awk -F'|' -v v=$1 '{printf "  %s %s %s r%s %s Gw/ms %s us\n",v,$2,$3,$6,$9,$7}' >> $S
}
for r in 1 2; do for v in exl3-bench-base exl3-bench exl3-bench-tma5; do g $v $r; done; done
timeout 100 $B/exl3-bench gemv --bits 2,3,5,6,7,8 --codebooks mul1 --int8 --no-check --rows 1 --shapes 8192x28672 \
  --json $R/gemv-k.json --markdown $R/gemv-k.md > $R/gemv-k.log 2>&1
echo "gemv K sweep rc $?" >> $S
grep -E '^\| linear-(int8|f16) ' $R/gemv-k.md | awk -F'|' '{printf "  K%s %s %s r%s %s Gw/ms %s us\n",$4,$2,$3,$6,$9,$7}' >> $S
ab() {  # variant mode batches model tag
  timeout 150 $B/$1 model --model $4 --backend cuda --prefill 128 --prefill-repeats 1 --batch $3 \
    --decode-steps 16 --int8-activations $2 --json $R/ab-$5-$1-$2.json --markdown $R/ab-$5-$1-$2.md > $R/ab-$5-$1-$2.log 2>&1
  echo "ab $5 $1 $2 rc $?" >> $S; grep -E 'decode batch' $R/ab-$5-$1-$2.log | sed "s/^/  $5 $1 $2 /" >> $S
}
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
for r in 1 2; do for v in exl3-bench-base exl3-bench exl3-bench-tma5; do ab $v auto 1,4,8,16,32 $M8 8b; done; done
rm -rf $M8
M70=/tmp/m70
$B/exl3-bench make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $?" >> $S
for v in exl3-bench-base exl3-bench exl3-bench-tma5; do ab $v auto 1 $M70 70b; done
rm -rf $M70
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
