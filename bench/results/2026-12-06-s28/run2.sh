#!/usr/bin/env bash
# Session 28, run 2: cf (branch s28-cluster-fence: the norm hand-off's cluster barriers with their
# release/acquire restricted to shared memory, no MEMBAR.ALL.GPU; the exit barrier's arrival right
# after the remote reads) against main (with lu merged). cf's GPU tests; the 8B decode at batch 1,
# 4, 16, 32 (int8 auto) in four alternating rounds; the 70B at batch 4 and 32 in two; then, where
# the machine has Nsight Systems, the kernels' time inside the step graphs (main, 8B, batch 1 and
# 32). Bundle: exl3-bench-main, exl3-bench-cf and the four *_gpu_test binaries built from cf.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_linear_gpu_test backend_ops_gpu_test step_graph_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t.log | tr '\n' ' ') at $SECONDS s" >> $S
done
timeout 200 $B/llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*TwoPointFive* > $R/llama_model_gpu_test.log 2>&1
echo "llama_model_gpu_test rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/llama_model_gpu_test.log | tr '\n' ' ') at $SECONDS s" >> $S
grep -h -B2 -A8 "Failure" $R/*_gpu_test.log | head -60 >> $S
M8=/tmp/m8; M70=/tmp/m70
[[ -d $M8 ]] || $B/exl3-bench-main make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b at $SECONDS s" >> $S
for r in 1 2 3 4; do for v in main cf; do
  timeout 60 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16,32 \
    --decode-steps 48 --int8-activations auto > $R/m8-$v-$r.log 2>&1
  echo "8b auto $v r$r rc $?: $(grep -E 'decode batch' $R/m8-$v-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done
[[ -d $M70 ]] || $B/exl3-bench-main make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b at $SECONDS s" >> $S
for r in 1 2; do for v in main cf; do
  timeout 90 $B/exl3-bench-$v model --model $M70 --backend cuda --prefill 128 --prefill-repeats 1 --batch 4,32 \
    --decode-steps 24 --int8-activations auto > $R/m70-$v-$r.log 2>&1
  echo "70b auto $v r$r rc $?: $(grep -E 'decode batch' $R/m70-$v-$r.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done; done
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}" >> $S
if [[ -n "$NSYS" ]]; then
  for b in 1 32; do
    timeout 120 $NSYS profile -o /tmp/nsys-b$b --force-overwrite true -t cuda --cuda-graph-trace=node \
      $B/exl3-bench-main model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch $b \
      --decode-steps 32 --int8-activations auto > $R/nsys-b$b.log 2>&1
    echo "nsys b$b rc $? at $SECONDS s" >> $S
    timeout 60 $NSYS stats --report cuda_gpu_kern_sum --format csv -o $R/nsys-b$b /tmp/nsys-b$b.nsys-rep >> $R/nsys-b$b.log 2>&1
    timeout 60 $NSYS stats --report cuda_gpu_trace --format csv -o /tmp/trace-b$b /tmp/nsys-b$b.nsys-rep >> $R/nsys-b$b.log 2>&1
    tail -n 4000 /tmp/trace-b${b}_cuda_gpu_trace.csv > $R/nsys-b$b-trace-tail.csv 2>/dev/null
  done
fi
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
