#!/usr/bin/env bash
# Session 14, for the next session if only one GPU is lent: the one-shot all-reduce's one-GPU tests
# (the kernel with ranks as streams of one GPU, graphs and the deadline; the communicator over
# Gloo), the model-mode rank code on one GPU (--ranks 1, the path every single-GPU run takes now),
# and the GPU tests that link the changed bench and planner code. Results under $OUT.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export PATH=$B:$PATH EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in oneshot_all_reduce_gpu_test p2p_all_reduce_gpu_test cuda_allocation_gpu_test kernel_bench_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $?" >> $S
timeout 120 $B/exl3-bench model --model $M8 --backend cuda --prefill 128,2048 --prefill-repeats 2 --batch 1,4,32 \
  --decode-steps 16 --int8-activations auto --json $R/model-8b.json --markdown $R/model-8b.md > $R/model-8b.log 2>&1
echo "model 8b rc $?" >> $S; grep -E 'prefill |decode batch' $R/model-8b.log | sed "s/^/  /" >> $S
rm -rf $M8
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
