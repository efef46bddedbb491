#!/usr/bin/env bash
# Session 14, prepared for a two-GPU machine (not run: no device was lent this session). The one-shot
# P2P all-reduce: its GPU tests (one GPU: the kernel with ranks as streams, the communicator over
# Gloo; two GPUs: over NCCL, graphs), the NCCL and step-graph multi-GPU tests, then the all-reduce
# sweep in CUDA graphs (f16, NCCL vs one-shot, 2K-1M), then the 70B shape in model mode (rank
# threads, no gRPC: prefill 2048, decode batch 1/4/32) and through serve (2048-token prompt, 64
# tokens, one client), each on one GPU, two GPUs TP over NCCL and two GPUs TP with the one-shot
# all-reduce (target 4 of issue 7: decode and prefill ratios). Results under $OUT. Needs the bundle's exl3-bench, exl3-launch, exl3-coordinator, exl3-worker and tests.
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; R=$OUT/r; mkdir -p $R
export PATH=$B:$PATH EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work NCCL_NVLS_ENABLE=0; mkdir -p /tmp/work
nvidia-smi topo -m > $R/topo.txt 2>&1
# sharded_logits_multi_gpu_test starts exl3-worker from the build's bin folder (a path compiled in).
mkdir -p /work/main/build/ci && rm -rf /work/main/build/ci/bin && ln -s $B /work/main/build/ci/bin
for t in oneshot_all_reduce_gpu_test p2p_all_reduce_gpu_test p2p_all_reduce_multi_gpu_test \
  nccl_communicator_multi_gpu_test step_graph_multi_gpu_test sharded_logits_multi_gpu_test; do
  timeout 150 $B/$t > $R/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $R/$t.log | tr '\n' ' ')" >> $S
done
for be in nccl oneshot; do
  for timing in graph host; do
    timeout 120 $B/exl3-bench allreduce --backend $be --timing $timing --ranks 2 --dtype f16 --iters 200 \
      --sizes 2K,8K,16K,32K,64K,128K,256K,512K,1M --oneshot-max 1M \
      --json $R/ar-$be-$timing.json --markdown $R/ar-$be-$timing.md > $R/ar-$be-$timing.log 2>&1
    echo "allreduce $be $timing rc $?" >> $S; grep -E '^\| [0-9]' $R/ar-$be-$timing.md | sed "s/^/  $be $timing /" >> $S
  done
done
# The one-shot kernel with fewer blocks (more lines a thread) where the size caps them: 256K-1M.
for nb in 33 66; do
  timeout 60 $B/exl3-bench allreduce --backend oneshot --timing graph --ranks 2 --dtype f16 --iters 200 \
    --sizes 256K,512K,1M --oneshot-max 1M --oneshot-blocks $nb \
    --json $R/ar-oneshot-b$nb.json --markdown $R/ar-oneshot-b$nb.md > $R/ar-oneshot-b$nb.log 2>&1
  echo "allreduce oneshot blocks $nb rc $?" >> $S; grep -E '^\| [0-9]' $R/ar-oneshot-b$nb.md | sed "s/^/  oneshot b$nb /" >> $S
done
# NCCL at its lowest-latency protocol, for a fair comparison at decode sizes.
NCCL_PROTO=LL timeout 120 $B/exl3-bench allreduce --backend nccl --timing graph --ranks 2 --dtype f16 --iters 200 \
  --sizes 2K,8K,16K,32K,64K,128K,256K --json $R/ar-nccl-ll-graph.json --markdown $R/ar-nccl-ll-graph.md \
  > $R/ar-nccl-ll-graph.log 2>&1
echo "allreduce nccl NCCL_PROTO=LL graph rc $?" >> $S; grep -E '^\| [0-9]' $R/ar-nccl-ll-graph.md | sed "s/^/  nccl-LL graph /" >> $S
M70=/tmp/m70
$B/exl3-bench make-model --shape llama-3.1-70b --out $M70 > $R/make-70b.log 2>&1; echo "make 70b rc $?" >> $S
model() {  # tag args: prefill 2048 and decode batch 1, 4, 32 in model mode (no gRPC), rank 0's times
  timeout 300 $B/exl3-bench model --model $M70 --backend cuda --prefill 2048 --prefill-repeats 2 --batch 1,4,32 \
    --decode-steps 16 --int8-activations auto $2 --json $R/model-70b-$1.json --markdown $R/model-70b-$1.md \
    > $R/model-70b-$1.log 2>&1
  echo "model 70b $1 rc $?" >> $S; grep -E 'prefill |decode batch' $R/model-70b-$1.log | sed "s/^/  $1 /" >> $S
}
model 1gpu "--ranks 1"
model tp2-nccl "--ranks 2 --all-reduce nccl"
model tp2-oneshot "--ranks 2 --all-reduce oneshot"
serve() {  # tag launch-args
  timeout 240 $B/exl3-bench serve --launch "--model $M70 $2 --max-seq-len 4096 --int8-activations auto" \
    --clients 1 --max-new-tokens 64 --prompt-tokens 2048 --json $R/serve-70b-$1.json --markdown $R/serve-70b-$1.md \
    > $R/serve-70b-$1.log 2>&1
  echo "serve 70b $1 rc $?" >> $S; tail -1 $R/serve-70b-$1.md | sed "s/^/  $1 /" >> $S
}
serve 1gpu "--gpus 0 --split 100"
serve tp2-nccl "--gpus 0,1 --split 70,70 --all-reduce nccl"
serve tp2-oneshot "--gpus 0,1 --split 70,70 --all-reduce oneshot"
serve tp2-oneshot-b "--gpus 0,1 --split 70,70 --all-reduce oneshot"
serve tp2-nccl-b "--gpus 0,1 --split 70,70 --all-reduce nccl"
rm -rf $M70
cp $S $R/
tar -C $OUT -cJf $OUT/results.tar.xz r && rm -rf $R
cat $S
