# Session 8, ninth run: GPU tests after the review refactor (one doubled-layout rule, one staged-values helper, one stage-problem struct).
set -u
B=/tmp/g/bin; S=$OUT/summary.txt; mkdir -p $OUT/r
export EXL3_TEST_SOURCE_DIR=$PWD EXL3_TEST_WORK_DIR=/tmp/work; mkdir -p /tmp/work
for t in exl3_linear_gpu_test backend_ops_gpu_test step_graph_gpu_test; do
  timeout 60 $B/$t > $OUT/r/$t.log 2>&1; echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/r/$t.log | tr '\n' ' ')" >> $S
done
cat $S
