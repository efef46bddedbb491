#!/usr/bin/env bash
# Session 19, run 3: run 2 with its variants bundled under their names (run 2 asked for an
# exl3-bench-final it did not carry) and a third merge. Variants: base (72b71b7); load (one page
# lookup per 32-key block when it lies in one page, F16 and quantized caches); merge1 (load, and a
# merge whose threads read the splits' (max, sum) in parallel and loop over the splits with
# unrolled independent loads, a thread a column); final (load, and a merge of 2 · D threads, each
# summing every 4th split of 2 columns, the 4 phases added in shared memory). The GPU tests that
# run attention on final's tree; the attention op alone (512 / 2048 / 8192 keys, F16; 2048 keys
# with 8- and 4-bit caches); the 8B at 2048-, 512- and 32-token prompts; Nsight Compute's
# durations of final's decode and merge kernels.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
t() {  # binary [args]
  local start=$SECONDS
  timeout 150 $B/$1 "${@:2}" > $R/$1.log 2>&1
  echo "$1 rc $? $((SECONDS - start)) s $(grep -E '^\[  (PASSED|FAILED) ' $R/$1.log | tr '\n' ' ')" >> $S
}
t cuda_ops_gpu_test
t backend_ops_gpu_test
t kv_quant_gpu_test
t quantized_cache_model_gpu_test
t step_graph_gpu_test
t llama_model_gpu_test --gtest_filter=-*HfBf16*:*Perplexity*
grep -h -B2 -A6 "Failure" $R/*.log | head -40 >> $S
$B/exl3-bench-final make-model --shape llama-3.1-8b --out /tmp/m8 > $R/make-8b.log 2>&1
for ctx in 512 2048 8192; do
  for v in base load merge1 final; do
    timeout 60 $B/exl3-bench-$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16,32,64 --context $ctx --timing graph \
      --markdown $R/kernels-$v-ctx$ctx.md > $R/kernels-$v-ctx$ctx.log 2>&1
    echo "attention ctx $ctx $v: $(grep -E '^\| attention' $R/kernels-$v-ctx$ctx.md | awk -F'|' '{print $6 "(" $11 ")"}' | tr -s ' ' | tr '\n' ' ')" >> $S
  done
done
for bits in 8 4; do
  for v in base final; do
    timeout 60 $B/exl3-bench-$v kernels --model /tmp/m8 --backend cuda --rows 1,4,16,32,64 --context 2048 --timing graph \
      --cache-bits $bits --markdown $R/kernels-$v-k$bits.md > $R/kernels-$v-k$bits.log 2>&1
    echo "attention ctx 2048 cache $bits $v: $(grep -E '^\| attention' $R/kernels-$v-k$bits.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
  done
done
for round in 1 2; do
  for v in base final; do
    timeout 90 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16,32,64 \
      --decode-prompt 2048 --decode-steps 32 --int8-activations off > $R/p2048-$v-$round.log 2>&1
    echo "8b p2048 off $v round $round: $(grep -E 'decode batch' $R/p2048-$v-$round.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  done
done
for v in base final; do
  timeout 60 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,32 \
    --decode-prompt 512 --decode-steps 64 --int8-activations auto > $R/p512-$v.log 2>&1
  echo "8b p512 auto $v: $(grep -E 'decode batch' $R/p512-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
  timeout 60 $B/exl3-bench-$v model --model /tmp/m8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,32 \
    --decode-steps 64 --int8-activations auto > $R/p32-$v.log 2>&1
  echo "8b p32 auto $v: $(grep -E 'decode batch' $R/p32-$v.log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
done
M="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size"
for rows in 1 32; do
  timeout 60 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:attention --metrics $M --csv \
    $B/exl3-bench-final kernels --model /tmp/m8 --backend cuda --rows $rows --context 2048 --timing host --iters 2 \
    --warmup 1 > $R/ncu-final-b$rows.csv 2> $R/ncu-final-b$rows.log
  echo "ncu final ctx 2048 rows $rows: $(grep -E 'gpu__time_duration' $R/ncu-final-b$rows.csv | tail -2 | awk -F'","' '{print $5 " " $NF}' | tr -d '"' | tr '\n' ' ')" >> $S
done
echo "done at $SECONDS s" >> $S
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
