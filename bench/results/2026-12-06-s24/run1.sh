#!/usr/bin/env bash
# Session 24, run 1: where the matmul's instructions go, then the 8B half of every target's figure.
# Nsight Compute (full set, SASS-level source counters exported) on the whole MUL1 linear's matmul,
# 4096x28672 at K=4: the int8 kernel at 1 row (targets 1-2) and the fp16 kernel at 32 rows with its
# output pass (target 3). Then the 8B targets (session 22's run 1, PART=targets, less the 70B: run 2).
# Bundle: exl3-bench, exl3-bench-nostore, exl3-launch, exl3-coordinator, exl3-worker (main).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export PATH=$B:$PATH
# Later parts are skipped once the call nears its 600 s limit, so that the results get packed.
left() { (( SECONDS < 200 )) || { echo "skipped at $SECONDS s: $*" >> $S; false; }; }
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> $S
# Ablation (timing only): exl3-bench-nostore is main with the fp16 linear's partial-product stores
# skipped (a store only if its first value is 3e-38, never true here, so the work stays).
for v in kept nostore; do
  [[ $v == kept ]] && b=$B/exl3-bench || b=$B/exl3-bench-$v
  timeout 90 $b gemv --bits 4 --codebooks mul1 --shapes 4096x28672,14336x4096,4096x6144,4096x4096 --rows 16,32 \
    --int8 --no-check --linear-bits 0 --markdown $R/gemv-$v.md > $R/gemv-$v.log 2>&1
  echo "gemv $v rc $? at $SECONDS s" >> $S; grep -E "linear-f16" $R/gemv-$v.md | sed "s/^/  $v /" >> $S
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu at $NCU" >> $S
prof() {  # name kernel-regex rows
  timeout 90 $NCU --clock-control none --set full --import-source no --kernel-name-base demangled -k "regex:$2" \
    --launch-skip 20 --launch-count 1 -o $R/ncu-$1 $B/exl3-bench gemv --bits 4 --codebooks mul1 --shapes 4096x28672 \
    --rows $3 --int8 --no-check --linear-bits 0 --iters 30 --repeats 1 > $R/ncu-$1.log 2>&1
  echo "ncu $1 rc $? at $SECONDS s" >> $S
  $NCU --import $R/ncu-$1.ncu-rep --page details --csv > $R/ncu-$1-details.csv 2>&1
  $NCU --import $R/ncu-$1.ncu-rep --page raw --csv > $R/ncu-$1-raw.csv 2>&1
  $NCU --import $R/ncu-$1.ncu-rep --page source --csv --print-source sass > $R/ncu-$1-sass.csv 2>&1
  grep -E '"(Duration|Executed Ipc Active|Issue Slots Busy|Achieved Occupancy|Registers Per Thread|DRAM Throughput|Executed Instructions)"' \
    $R/ncu-$1-details.csv | cut -d, -f13-16 | sed "s/^/  $1 /" >> $S
}
prof int8-m1 'exl3_gemv_int8_kernel' 1
prof fp16-m32 'exl3_gemv_kernel<4.*true>' 32
prof out-m32 'gemv_output_kernel' 32
echo "profiles done at $SECONDS s" >> $S
M8=/tmp/m8
$B/exl3-bench make-model --shape llama-3.1-8b --out $M8 > $R/make-8b.log 2>&1; echo "make 8b rc $? at $SECONDS s" >> $S
left model-off && timeout 120 $B/exl3-bench model --model $M8 --backend cuda --prefill 128,2048 --prefill-repeats 2 --batch 1,4,8,16,32,64 \
  --decode-steps 32 --int8-activations off --json $R/model-8b-off.json --markdown $R/model-8b-off.md > $R/model-8b-off.log 2>&1
echo "model 8b off rc $? at $SECONDS s" >> $S; grep -E 'decode batch|prefill |roofline' $R/model-8b-off.log | sed "s/^/  off /" >> $S
left model-auto && timeout 60 $B/exl3-bench model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1,2,4,8 \
  --decode-steps 32 --int8-activations auto --json $R/model-8b-auto.json --markdown $R/model-8b-auto.md > $R/model-8b-auto.log 2>&1
echo "model 8b auto rc $? at $SECONDS s" >> $S; grep -E 'decode batch|roofline' $R/model-8b-auto.log | sed "s/^/  auto /" >> $S
left gemv && timeout 150 $B/exl3-bench gemv --codebooks mul1 --bits 2,3,4,5,6,7,8 --rows 1,2,4,8 --no-check --linear-bits 0 \
  --int8 --json $R/gemv.json --markdown $R/gemv.md > $R/gemv.log 2>&1; echo "gemv rc $? at $SECONDS s" >> $S
grep -E "linear-int8|linear-f16" $R/gemv.md | grep -E "\| 1 \|" | head -30 >> $S
for i8 in off auto; do
  left ctx && timeout 60 $B/exl3-bench model --model $M8 --backend cuda --prefill 128 --prefill-repeats 1 --batch 1 --decode-prompt 128 \
    --decode-steps 512 --warmup 1 --int8-activations $i8 --json $R/model-8b-ctx-$i8.json --markdown $R/model-8b-ctx-$i8.md \
    > $R/model-8b-ctx-$i8.log 2>&1
  echo "model 8b ctx $i8 rc $?" >> $S; grep -E 'decode batch' $R/model-8b-ctx-$i8.log | sed "s/^/  ctx $i8 /" >> $S
  left serve && timeout 120 $B/exl3-bench serve --launch "--model $M8 --gpus 0 --max-seq-len 4096 --int8-activations $i8" \
    --clients 1 --max-new-tokens 512 --json $R/serve-8b-$i8.json --markdown $R/serve-8b-$i8.md > $R/serve-8b-$i8.log 2>&1
  echo "serve 8b $i8 rc $? at $SECONDS s" >> $S; tail -1 $R/serve-8b-$i8.md | sed "s/^/  $i8 /" >> $S
done
for i8 in auto off; do
  left kernels && timeout 60 $B/exl3-bench kernels --model $M8 --backend cuda --rows 1,32 --context 512 --timing graph \
    --int8-activations $i8 --markdown $R/kernels-8b-$i8.md > $R/kernels-8b-$i8.log 2>&1
  echo "kernels 8b $i8 rc $? at $SECONDS s" >> $S
done
echo "done at $SECONDS s" >> $S
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
