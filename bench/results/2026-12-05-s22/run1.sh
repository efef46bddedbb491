#!/usr/bin/env bash
# Session 22, run 1: decode attention variants first (they decide what the session does next),
# then every target's figure for the tree (session 21's run8.sh target part, the same commands).
# Variants (exl3-bench-V, each main 047d04f with one change): mk2 / mk4, quantized caches with at
# least 2 / 4 32-key blocks a split (QuantSource::kMinKeysPerSplit); dq4, the decode kernel of
# quantized caches in 4-warp blocks whose warps 1-3 only help stage and dequantize the tiles
# (QuantSource::kDecodeWarps 4, branch s22-decode-warps); da4, the same for F16 pages too. The op
# alone at 2048 keys (batch 1-64) and the 8B (int8 off) at 2048- and 512-token prompts, batch 1-64,
# with 4-bit, 8-bit and F16 caches. PART=variants or PART=targets runs one half; left unset, an H200
# runs both, another GPU the variants only (its target figures are session 18's, on an H100).
# Then the GPU tests that run decode attention, built as da4 (X-da4).
# Bundle: exl3-bench, exl3-bench-{mk2,mk4,dq4,da4}, exl3-launch, exl3-coordinator, exl3-worker,
# {kv_quant,cuda_ops,quantized_cache_model,backend_ops,step_graph,llama_model}_gpu_test-da4.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export PATH=$B:$PATH
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
cp $B/exl3-bench $B/exl3-bench-kept
if [[ -z ${PART:-} ]]; then nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && PART=all || PART=variants; fi
echo "PART=$PART" >> $S
if [[ ${PART:-all} != targets ]]; then
variants_of() { [[ $1 == 16 ]] && echo "kept da4" || echo "kept mk2 mk4 dq4 da4"; }
for bits in 4 16 8; do
  for v in $(variants_of $bits); do
    timeout 60 $B/exl3-bench-$v kernels --model $M8 --backend cuda --rows 1,4,16,32,64 --context 2048 --timing graph \
      --cache-bits $bits --markdown $R/kernels-$v-k$bits.md > $R/kernels-$v-k$bits.log 2>&1
    echo "attention cache $bits ctx 2048 $v: $(grep -E '^\| attention' $R/kernels-$v-k$bits.md | awk -F'|' '{print $6}' | tr -s ' ' | tr '\n' ' ')" >> $S
  done
done
models() {  # prompt
  for bits in 4 16 8; do
    for v in $(variants_of $bits); do
      log=$R/p$1-k$bits-$v.log
      timeout 90 $B/exl3-bench-$v model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,4,16,32,64 \
        --decode-prompt $1 --decode-steps 32 --int8-activations off --cache-bits $bits > $log 2>&1
      echo "8b p$1 off cache $bits $v: $(grep -E 'decode batch' $log | awk '{print $(NF-1)}' | tr '\n' ' ')" >> $S
    done
  done
}
models 2048
# The GPU tests that run decode attention, built with da4 (both sources in 4-warp decode blocks; the
# quantized source's code is dq4's).
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in kv_quant_gpu_test cuda_ops_gpu_test quantized_cache_model_gpu_test backend_ops_gpu_test step_graph_gpu_test \
         llama_model_gpu_test; do
  timeout 150 $B/$t-da4 > $R/$t-da4.log 2>&1; echo "$t-da4 rc $? $(grep -E '^\[  (PASSED|FAILED) ' $R/$t-da4.log | tr '\n' ' ')" >> $S
done
grep -h -B2 -A6 "Failure" $R/*-da4.log | head -40 >> $S
echo "tests done at $SECONDS s" >> $S
models 512
echo "variants done at $SECONDS s" >> $S
fi
if [[ ${PART:-all} != variants ]]; then
timeout 150 $B/exl3-bench gemv --codebooks mul1 --bits 2,3,4,5,6,7,8 --rows 1,2,4,8 --no-check --linear-bits 0 \
  --int8 --json $R/gemv.json --markdown $R/gemv.md > $R/gemv.log 2>&1; echo "gemv rc $? at $SECONDS s" >> $S
grep -E "linear-int8|linear-f16" $R/gemv.md | grep -E "\| 1 \|" | head -30 >> $S
timeout 120 $B/exl3-bench model --model $M8 --backend cuda --prefill 128,2048 --prefill-repeats 2 --batch 1,4,8,16,32,64 \
  --decode-steps 32 --int8-activations off --json $R/model-8b-off.json --markdown $R/model-8b-off.md > $R/model-8b-off.log 2>&1
echo "model 8b off rc $? at $SECONDS s" >> $S; grep -E 'decode batch|prefill |roofline' $R/model-8b-off.log | sed "s/^/  off /" >> $S
timeout 60 $B/exl3-bench model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2,4,8 \
  --decode-steps 32 --int8-activations auto --json $R/model-8b-auto.json --markdown $R/model-8b-auto.md > $R/model-8b-auto.log 2>&1
echo "model 8b auto rc $? at $SECONDS s" >> $S; grep -E 'decode batch|roofline' $R/model-8b-auto.log | sed "s/^/  auto /" >> $S
for i8 in off auto; do
  timeout 60 $B/exl3-bench model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-prompt 128 \
    --decode-steps 512 --warmup 1 --int8-activations $i8 --json $R/model-8b-ctx-$i8.json --markdown $R/model-8b-ctx-$i8.md \
    > $R/model-8b-ctx-$i8.log 2>&1
  echo "model 8b ctx $i8 rc $?" >> $S; grep -E 'decode batch' $R/model-8b-ctx-$i8.log | sed "s/^/  ctx $i8 /" >> $S
  timeout 120 $B/exl3-bench serve --launch "--model $M8 --gpus 0 --max-seq-len 4096 --int8-activations $i8" \
    --clients 1 --max-new-tokens 512 --json $R/serve-8b-$i8.json --markdown $R/serve-8b-$i8.md > $R/serve-8b-$i8.log 2>&1
  echo "serve 8b $i8 rc $? at $SECONDS s" >> $S; tail -1 $R/serve-8b-$i8.md | sed "s/^/  $i8 /" >> $S
done
M70=/tmp/m70
$B/exl3-bench make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $? at $SECONDS s" >> $S
for i8 in off auto; do
  prefill="--prefill 2048 --prefill-repeats 1"; [[ $i8 == auto ]] && prefill="--prefill 128 --prefill-repeats 1"
  timeout 200 $B/exl3-bench model --model $M70 --backend cuda $prefill --batch 1,4,32 \
    --decode-steps 16 --int8-activations $i8 --json $R/model-70b-$i8.json --markdown $R/model-70b-$i8.md \
    > $R/model-70b-$i8.log 2>&1
  echo "model 70b $i8 rc $? at $SECONDS s" >> $S; grep -E 'decode batch|prefill |roofline' $R/model-70b-$i8.log | sed "s/^/  $i8 /" >> $S
done
rm -rf $M70
fi
echo "done at $SECONDS s" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
