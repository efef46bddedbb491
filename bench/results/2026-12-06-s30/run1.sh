#!/usr/bin/env bash
# Session 30, run 1: main (d7d03be) on whatever one GPU comes: the GPU tests of the int8 one-row
# dispatch (not rerun after d7d03be), then session 29's run-h200-targets.sh without the 70B (not
# run this session): the linears at one row (K = 2..8) and the 8B decode rounds. Then what the
# batch-1 output passes cost in the step as it runs (graphs, dependent launches): branch
# s30-output-cost built with the pass skipped at one row (skip: the outputs go unwritten, a timing
# only) and with an empty pass of the same grid (empty: the launch boundary alone).
set -u
. bench/device_run.sh
device_begin
device_gpu_tests exl3_gemv_int8_gpu_test exl3_linear_gpu_test backend_ops_gpu_test step_graph_gpu_test llama_model_gpu_test
device_target_linears main
device_target_8b main 2
device_model_rounds 4 "main skip empty" 8b 1 64
device_end
