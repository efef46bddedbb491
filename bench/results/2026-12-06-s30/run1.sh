#!/usr/bin/env bash
# Session 30, run 1: main (d7d03be) on whatever one GPU comes: the GPU tests of the int8 one-row
# dispatch (not rerun after d7d03be), then session 29's run-h200-targets.sh split in two calls:
# here the linears at one row (K = 2..8) and the 8B decode rounds; run 2 the 70B. Then what the
# batch-1 output passes cost in the step as it runs (graphs, dependent launches): branch
# s30-output-cost built with the pass skipped at one row (skip: the outputs go unwritten, a timing
# only) and with an empty pass of the same grid (empty: the launch boundary alone).
set -u
. bench/device_run.sh
device_begin
device_gpu_tests exl3_gemv_int8_gpu_test exl3_linear_gpu_test backend_ops_gpu_test step_graph_gpu_test llama_model_gpu_test
V=main
timeout 150 $B/exl3-bench-$V gemv --codebooks mul1 --bits 2,3,4,5,6,7,8 --rows 1 --no-check --linear-bits 0 \
  --int8 --json $R/gemv.json --markdown $R/gemv.md > $R/gemv.log 2>&1; echo "gemv rc $? at $SECONDS s" >> $S
grep -E "linear-int8|linear-f16" $R/gemv.md | head -60 >> $S
device_model 8b
for r in 1 2; do
  for i8 in auto off; do
    batches=1,4,8; [[ $i8 == off ]] && batches=1,4,16,32,64
    log=$R/model-8b-$i8-$r.log
    timeout 120 $B/exl3-bench-$V model --model /tmp/m8b --backend cuda --prefill 128 --prefill-repeats 1 --batch $batches \
      --decode-steps 32 --int8-activations $i8 --json $R/model-8b-$i8-$r.json --markdown $R/model-8b-$i8-$r.md > $log 2>&1
    echo "model 8b $i8 r$r rc $? at $SECONDS s" >> $S; grep -E '^\| [0-9]+ \| [0-9]+ \|' $R/model-8b-$i8-$r.md | sed "s/^/  $i8 /" >> $S
  done
done
device_model_rounds 4 "main skip empty" 8b 1 64
device_end
