#!/usr/bin/env bash
# Session 31, run 1: session 30's run 3 (bench/results/2026-12-06-s30/run3.sh) with the test
# binaries that fit the 64 MiB the device takes (the backend-ops tests left out): the one-row int8
# matmul finishing its own outputs, a warp at a time with acquire-release fences (own, branch
# s30-own-output) and a block at a time (ownblk, branch s30-own-block), against main.
# Bundle: exl3-bench-main/-own/-ownblk, exl3_gemv_int8_gpu_test-own/-ownblk,
# llama_model_gpu_test-own/-ownblk.
set -u
. bench/device_run.sh
device_begin
for v in own ownblk; do
  device_gpu_tests exl3_gemv_int8_gpu_test-$v llama_model_gpu_test-$v
done
device_model_rounds 3 "main own ownblk" 8b "1,4" 64
device_model_rounds 2 "main own ownblk" 70b 1 32
device_step_breakdown ownblk 8b 1
device_end
