# The steps the device runs' scripts (bench/results/*/runN.sh) share, sourced by them: A/B rounds
# of builds against each other and step breakdowns, where scripts/p4-gpu-bench measures one build
# for the P4 targets. Each run writes one summary line per step to $OUT/summary.txt and its logs
# under $OUT/r, packed into $OUT/results.tar.xz at the end. Binaries come from the bundle
# (/tmp/g/bin: exl3-bench-VARIANT and the *_gpu_test binaries); models are made once per machine
# under /tmp. Every step has a timeout.
#   . bench/device_run.sh
#   device_begin
#   device_gpu_tests exl3_linear_gpu_test backend_ops_gpu_test llama_model_gpu_test
#   device_model_rounds 4 "main branch" 8b "1,4,32" 48
#   device_target_8b main 2
#   device_end

B=/tmp/g/bin
S=$OUT/summary.txt
R=$OUT/r

# The GPU, clock and driver into the summary; the test binaries' environment.
device_begin() {
  mkdir -p "$R" /tmp/work
  nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader >> "$S"
  export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work
}

# Each named *_gpu_test binary (a variant suffix allowed), its gtest verdict and the first
# failures. llama_model_gpu_test skips the cases whose fixtures stay in ../shared (they do not
# travel).
device_gpu_tests() {
  local t filter
  for t in "$@"; do
    filter=()
    [[ $t == llama_model_gpu_test* ]] && filter=(--gtest_filter=-*HfBf16*:*Perplexity*TwoPointFive*)
    timeout 200 "$B/$t" "${filter[@]}" > "$R/$t.log" 2>&1
    echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' "$R/$t.log" | tr '\n' ' ') at $SECONDS s" >> "$S"
  done
  grep -h -B2 -A8 "Failure" "$R"/*_gpu_test*.log 2>/dev/null | head -60 >> "$S"
}

# The synthetic model of `shape` (8b or 70b: llama-3.1-8b / -70b) at /tmp/m<shape>, made once.
device_model() {
  local dir=/tmp/m$1
  if [[ ! -d $dir ]]; then
    timeout 300 "$B/exl3-bench-main" make-model --shape "llama-3.1-$1" --out "$dir" > "$R/make-$1.log" 2>&1
    echo "make $1 rc $? at $SECONDS s" >> "$S"
  fi
}

# `rounds` alternating rounds of exl3-bench model (int8 auto, 128-token prompts) for each variant:
# device_model_rounds ROUNDS "VARIANTS" SHAPE BATCHES STEPS; one line of tokens/s per batch. A
# variant is a build (exl3-bench-VARIANT), or BUILD:NAME=VALUE to run that build with one variable
# of the environment set.
device_model_rounds() {
  local rounds=$1 variants=$2 shape=$3 batches=$4 steps=$5 r v log
  local -a setting
  device_model "$shape"
  for ((r = 1; r <= rounds; ++r)); do
    for v in $variants; do
      log=$R/m$shape-${v//[:=]/-}-$r.log
      setting=()
      [[ $v == *:* ]] && setting=("${v#*:}")
      env "${setting[@]}" timeout 120 "$B/exl3-bench-${v%%:*}" model --model "/tmp/m$shape" --backend cuda \
        --prefill 128 --prefill-repeats 1 --batch "$batches" --decode-steps "$steps" --int8-activations auto \
        > "$log" 2>&1
      echo "$shape auto $v r$r rc $?: $(grep -E 'decode batch' "$log" | awk '{print $(NF-1)}' | tr '\n' ' ')" >> "$S"
    done
  done
}

# Targets 1-3 of one build (exl3-bench-VARIANT) in the commands of session 22's target part:
# device_target_linears VARIANT: the linears at one row, K = 2..8 (70B matrices, int8 and fp16
# activations); device_target_8b VARIANT ROUNDS: the 8B decode with int8 auto (batch 1, 4, 8) and
# off (1-64); device_target_70b VARIANT ROUNDS: the 70B at batch 1 and 32 (auto).
device_target_linears() {
  local v=$1
  timeout 150 "$B/exl3-bench-$v" gemv --codebooks mul1 --bits 2,3,4,5,6,7,8 --rows 1 --no-check --linear-bits 0 \
    --int8 --json "$R/gemv.json" --markdown "$R/gemv.md" > "$R/gemv.log" 2>&1
  echo "gemv rc $? at $SECONDS s" >> "$S"
  grep -E "linear-int8|linear-f16" "$R/gemv.md" | head -60 >> "$S"
}

device_target_8b() {
  local v=$1 rounds=$2 r i8 batches log
  device_model 8b
  for ((r = 1; r <= rounds; ++r)); do
    for i8 in auto off; do
      batches=1,4,8; [[ $i8 == off ]] && batches=1,4,16,32,64
      log=$R/model-8b-$i8-$r.log
      timeout 120 "$B/exl3-bench-$v" model --model /tmp/m8b --backend cuda --prefill 128 --prefill-repeats 1 \
        --batch "$batches" --decode-steps 32 --int8-activations "$i8" --json "$R/model-8b-$i8-$r.json" \
        --markdown "$R/model-8b-$i8-$r.md" > "$log" 2>&1
      echo "model 8b $i8 r$r rc $? at $SECONDS s" >> "$S"
      grep -E '^\| [0-9]+ \| [0-9]+ \|' "$R/model-8b-$i8-$r.md" | sed "s/^/  $i8 /" >> "$S"
    done
  done
}

device_target_70b() {
  local v=$1 rounds=$2 r log
  device_model 70b
  for ((r = 1; r <= rounds; ++r)); do
    log=$R/model-70b-auto-$r.log
    timeout 150 "$B/exl3-bench-$v" model --model /tmp/m70b --backend cuda --prefill 128 --prefill-repeats 1 \
      --batch 1,32 --decode-steps 16 --int8-activations auto --json "$R/model-70b-auto-$r.json" \
      --markdown "$R/model-70b-auto-$r.md" > "$log" 2>&1
    echo "model 70b auto r$r rc $? at $SECONDS s" >> "$S"
    grep -E '^\| [0-9]+ \| [0-9]+ \|' "$R/model-70b-auto-$r.md" | sed "s/^/  auto /" >> "$S"
  done
}

# Targets 1-3 of one build (the three steps above, two rounds each) when the GPU is an H200, whose
# figures the README's target table wants: device_h200_targets VARIANT; returns 1 on any other GPU.
device_h200_targets() {
  nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || return 1
  echo "variant $1 (H200 targets)" >> "$S"
  device_target_linears "$1"
  device_target_8b "$1" 2
  device_target_70b "$1" 2
}

# Nsight Compute's full sections for two one-row K=4 int8 launches (exl3_gemv_int8_kernel<4, 1,
# 0, 1>: a decode step's q/k/v and o, past the prefill's and the warm-up's) of the 8B at batch 1:
# device_one_row_sections VARIANT, the report in $R/ncu-full-VARIANT.txt, its main lines in the
# summary.
device_one_row_sections() {
  local v=$1 report=$R/ncu-full-$1.txt
  device_model 8b
  timeout 150 /usr/local/cuda/bin/ncu --clock-control none --kernel-name-base demangled \
    --kernel-name "regex:exl3_gemv_int8_kernel<\\(int\\)4, \\(int\\)1, \\(bool\\)0, \\(bool\\)1>" \
    --launch-skip 300 --launch-count 2 --set full "$B/exl3-bench-$v" model --model /tmp/m8b --backend cuda \
    --prefill 16 --prefill-repeats 1 --batch 1 --decode-steps 8 --warmup 1 --step-graphs off \
    --int8-activations auto > "$report" 2>&1
  echo "ncu full $v rc $? at $SECONDS s" >> "$S"
  grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Memory Throughput|Local Memory|\
Stack Size|Waves Per SM|Grid Size|Dynamic Shared|Executed Ipc A|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|\
L2 Compression Input" "$report" | head -44 >> "$S"
}

# Where a decode step's kernel time goes (Nsight Compute, every launch, step graphs off, real
# clocks): device_step_breakdown VARIANT SHAPE BATCH, summed over the last 3 of 4 steps by
# bench/ncu_step_breakdown.py.
device_step_breakdown() {
  local v=$1 shape=$2 batch=$3 csv=$R/ncu-$1-$2-b$3.csv
  device_model "$shape"
  timeout 300 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    --launch-count 40000 "$B/exl3-bench-$v" model --model "/tmp/m$shape" --backend cuda --prefill 16 \
    --prefill-repeats 1 --batch "$batch" --decode-steps 4 --warmup 1 --step-graphs off --int8-activations auto \
    > "$csv" 2> "${csv%.csv}.log"
  echo "ncu $v $shape b$batch rc $? $(wc -l < "$csv") lines at $SECONDS s" >> "$S"
  python3 bench/ncu_step_breakdown.py "$csv" 3 >> "$S" 2>&1
  xz -9 "$csv"
}

# The summary into the logs, the logs packed, the summary printed.
device_end() {
  cp "$S" "$R/"
  tar -C "$OUT" -cJf "$OUT/results.tar.xz" r && rm -rf "$R"
  cat "$S"
}
