#!/usr/bin/env bash
# Mutation check: do the tests catch what their names claim? Each mutation below is a small,
# plausible bug (issue 28, section 5: each once left every test green). For each one this
# script applies it to the source in place, builds the test binary that should catch it,
# runs that test (ctest -R REGEX) and reports "killed" (the test failed, as it must) or
# "SURVIVED" (it passed: the test does not check what it claims); then puts the file back.
#
#   scripts/mutate.sh [-l] [-b] [-k] [NAME...]
#     NAME   only these mutations (default: all); -l lists them and exits
#     -b     also run each test unmutated first: it must pass, or the verdict means nothing
#     -k     keep going past a mutation that does not apply or does not build (default: stop)
#   BUILD=build/release (the build folder; scripts/build.sh release builds it)
#
# Exit status: 0 when every mutation run was killed, 1 otherwise.
#
# Safety: a mutated file is copied aside first and copied back after its test, and an EXIT /
# INT / TERM trap copies it back if the script stops anywhere in between (a failed build, ^C),
# so the tree is left as it was found. A file with uncommitted changes is refused (its
# backup would be the only copy of them). The binaries are left built from the restored
# sources on the next build (ccache makes that rebuild cheap).
#
# An entry: name | file | sed expression (applied with sed -i; it must change the file) |
# test target | ctest regex of the test that must fail.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/release}

MUTATIONS=(
  # 1. DDP accumulation outside deterministic mode sums the micro-batch means.
  "ddp-accumulation-sums|src/braid/parallel/data_parallel.cpp|s/m > 1 && !options_.deterministic ? 1.0f \/ static_cast<float>(m) : 1.0f/1.0f/|parallel_ddp_test|Ddp.AccumulatingRanksEqualOneProcessOnTheGlobalBatch"
  # ... the accumulation local SGD's local steps (and a parameter-server worker) share ...
  "accumulation-sums|src/braid/parallel/strategy.cpp|s/const float scale = m > 1 ? 1.0f \/ static_cast<float>(m) : 1.0f;/const float scale = 1.0f;/|parallel_local_sgd_test|LocalSgd.AccumulatedMicroBatchesEqualTheWholeShard"
  # ... and the one-process strategy's own.
  "single-accumulation-sums|src/braid/parallel/single_process.cpp|s/const float scale = m > 1 && !ordered ? 1.0f \/ static_cast<float>(m) : 1.0f;/const float scale = 1.0f;/|parallel_ddp_test|Accumulation.MicroBatchesEqualOneLargeBatch"
  # 2. 1F1B's warm-up one forward short.
  "1f1b-warmup-short|src/braid/parallel/pipeline_schedule.cpp|s/const int warmup = std::min(stages - stage - 1, m);/const int warmup = std::min(stages - stage - 2, m);/|parallel_pipeline_test|PipelineSchedule.(WarmUpIsExactly|SimulatedBubble)"
  # ... and interleaved 1F1B's.
  "interleaved-warmup-short|src/braid/parallel/pipeline_schedule.cpp|s/(P - stage - 1) \* 2 + (v - 1) \* P, total/(P - stage - 1) * 2 + (v - 1) * P - 1, total/|parallel_pipeline_test|PipelineSchedule.(WarmUpIsExactly|SimulatedBubble)"
  # 3. Local SGD's periodic average leaves the batch-norm statistics out (synchronize(),
  #    which averages the optimizer state too, still averages them).
  "local-sgd-skips-buffers|src/braid/parallel/local_sgd.cpp|s/^\( *\)for (const nn::NamedBuffer& b : params_.buffers())/\1if (!state.empty()) for (const nn::NamedBuffer\& b : params_.buffers())/|parallel_local_sgd_test|LocalSgd.PeriodicAverageAveragesBatchNormStatistics"
  # 4. FedAvg's round loop weighs each client alike instead of by its samples.
  "fedavg-weighs-clients|src/braid/train/trainer_fedavg.cpp|s/samples += u.samples;/samples += 1;/|test_train|FedAvgRounds"
  # ... or the server's federated round weighs each worker's push alike.
  "fedavg-weighs-workers|src/braid/parallel/ps_shard.cpp|s/weight_sum_ += static_cast<double>(p.weight);/weight_sum_ += 1;/|test_train|FedAvgRounds"
  # 5. LayerNorm's backward with one term off by a factor 1 + 1/D: the gradient check...
  "layernorm-backward-term|src/braid/nn/layernorm.cpp|s/mean_gx = sum_gx \* inv_dim;/mean_gx = sum_gx * inv_dim * (1.0f + inv_dim);/|test_nn|LayerNorm.GradientsMatch"
  # 7. ... and the seam pin of gpt-tiny (on a CPU family with pins; on one without, the pin
  #    test fails anyway, asking for them).
  "layernorm-backward-term-pin|src/braid/nn/layernorm.cpp|s/mean_gx = sum_gx \* inv_dim;/mean_gx = sum_gx * inv_dim * (1.0f + inv_dim);/|test_train|SeamPin"
  # 7. A CPU family without pins fails the pin test instead of passing it vacuously.
  "seam-pin-unknown-cpu|tests/train/seam_pin_test.cpp|s/{\"Cooperlake\/avx512_bf16\",/{\"Unknown\/none\",/|test_train|SeamPin"
  # 6. A zero-byte write puts a byte on the stream.
  "socket-zero-byte-write-sends|src/braid/comm/socket.cpp|/^void Socket::write_all/,/^}/s/^  size_t done = 0;/  size_t done = 0;\n  if (bytes == 0) { const uint8_t z = 0; (void)::send(fd_, \&z, 1, MSG_NOSIGNAL); }/|comm_socket_test|Socket.ZeroByteIoIsANoOp"
  # 8. The tensor-parallel checkpoint gathers only tensor rank 0's shard of the optimizer
  #    state (the others' parts stay zero); the parameters are untouched.
  "tp-state-gather-one-shard|src/braid/parallel/mesh_strategy.cpp|s/^\( *\)comm::allreduce(\*tensor, full.f32(),/\1if (false) comm::allreduce(*tensor, full.f32(),/|parallel_tensor_parallel_test|TensorParallel.StateIsOneProcessLayoutAndResumesAsOneProcess"
  # Sections 1-3 (the job surface). A ps worker destroyed by an error says done, not fail.
  "ps-failed-worker-says-done|src/braid/parallel/ps_worker.cpp|s/const bool failing = std::uncaught_exceptions() > 0;/const bool failing = false;/|parallel_ps_test|Ps.AWorkerThatFailsIsNeverCountedAsFinished"
  # Sync servers never drop a silent worker (the job waits out the deadline, blaming the server).
  "ps-sync-never-silent|src/braid/train/ps_serve.cpp|s/: std::max(std::chrono::milliseconds(1), deadline \/ 2);/: std::chrono::milliseconds(0);/|test_cli|JobOutcome.StalledSyncWorkerFailsTheJobNamingIt"
  # The launcher never stops ps workers left running after the servers finished.
  "launcher-waits-on-stranded|src/braid/launch/launcher.cpp|s/if (options_.servers == 0 .. kill_at_) return;/if (true) return;/|test_cli|JobOutcome.StalledAsyncWorkerDoesNotHangTheJob"
  # The launcher's headline blames the rank that gave up waiting.
  "launcher-blames-the-waiter|src/braid/launch/launcher.cpp|s/    if (f.signal != 0) return std::nullopt;/    return std::nullopt;/|test_cli|JobOutcome.StalledSyncWorkerFailsTheJobNamingIt"
  # Ranks are not compared on their configs.
  "no-config-agreement|src/braid/cli/train_command.cpp|/train::check_same_config(\*job->world, config);/d|test_cli|JobOutcome.RanksWithDifferentConfigsAreRefusedNamingEachKey"
  # Collectives do not publish their call in the shared window.
  "no-call-publication|src/braid/comm/collectives.cpp|/w->publish_call(g.rank(), seq, sig);/d|comm_shared_buffer_test|SharedBuffer.AnotherCallMeetingAnAllreduceFailsAtOnce"
  # A resume writes into the --out recorded in the checkpoint.
  "resume-into-recorded-out|src/braid/cli/train_command.cpp|/j\["out"\] = run_dir_of(resume_dir);/d|test_cli|JobOutcome.ResumeWritesIntoTheRunItWasGiven"
  # A resume under another world size takes the saved per-rank batch.
  "resume-keeps-rank-batch|src/braid/cli/train_command.cpp|/config = keep_global_batch(config, saved_state, place, resume_dir);/d|test_cli|JobOutcome.ResumeUnderAnotherWorldSizeKeepsTheGlobalBatch"
  # The checkpoint's step offset is ignored when checking the position.
  "resume-ignores-step-offset|src/braid/train/trainer_checkpoint.cpp|s/step == loader_epoch \* per_epoch + position + offset,/step == loader_epoch * per_epoch + position,/|test_cli|JobOutcome.ResumeAtAnotherBatchWritesResumableCheckpoints"
  # braid eval keeps the run's distribution keys.
  "eval-keeps-distribution|src/braid/cli/train_command.cpp|/^  drop_distribution(j);$/d|test_cli|JobOutcome.ShardedAndPipelineRunsEvaluateAndResumeAsOneProcess"
  # A sync job that lost a worker reports itself converged.
  "ps-unfinished-as-converged|src/braid/parallel/ps_worker.cpp|s/  if (stop_reason_ != PsStopReason::worker_left) return \"\";/  return \"\";/|test_cli|JobOutcome.SyncJobThatLosesAWorkerEndsUnfinished"
  # Issue 29. The coordinator names the first member as the round's source, not the one
  # holding the newest commit.
  "membership-source-not-newest|src/braid/comm/membership.cpp|s/if (a.member == closed.members\[i\] \&\& a.step > newest) {/if (a.member == closed.members[i] \&\& a.step > newest \&\& false) {/|comm_membership_test|Membership.SurvivorsCloseTheNextRoundAloneAndTheNewestCommitIsTheSource"
  # ... an elastic round restores the state but not the loader's place in the epoch.
  "elastic-restore-skips-loader|src/braid/train/trainer_commit.cpp|s/      train_loader_->restore(ls);/      (void)ls;/|test_cli|Elastic.DeterministicJobThatLostARankEqualsTheSameMembershipChangeUndisturbed"
  # ... elastic ZeRO puts the state together from the members' own shards only, not the
  # copies of their neighbours' (a lost rank's shard is then lost).
  "zero-shards-ignore-neighbours|src/braid/train/shard_recovery.cpp|s/    if (shard.empty()) continue;/    if (shard.empty() or s >= 2) continue;/|test_cli|ElasticZero.Stage3JobThatLostARankEqualsTheSameMembershipChangeUndisturbed"
  # ... elastic local SGD commits between averages, where the ranks' replicas differ.
  "local-sgd-commits-between-averages|src/braid/parallel/local_sgd.h|s/    return steps_done <= local_.start_step/    return true or steps_done <= local_.start_step/|test_cli|ElasticLocalSgd.JobThatLostARankGoesOnFromTheLastAverageAsTheSameChangeUndisturbed"
  # ... a pipeline's commit packs parameters not made current from the stages.
  "mesh-commit-stale-parameters|src/braid/parallel/mesh_strategy.cpp|s/^  synchronize();  \/\/ the whole parameters too/  \/\/ synchronize();/|test_cli|Strategies/ElasticModelParallel.ARestartedRankRebuildsTheMeshAndTheRunIsTheUndisturbedOne"
  # ... a round short of --min-ranks fails at once though a restart is on its way.
  "short-round-waits-for-nobody|src/braid/comm/membership.cpp|s/  if (short_of_members \&\& on_their_way \&\& !timed_out) return std::nullopt;/  (void)on_their_way;/|comm_membership_test|Membership.ARoundShortOfMembersWaitsForARestartOnItsWay"
  # Issue 30: a lossy decode leaves the alignment gaps between parameters non-zero (backward
  # never writes them; sign put its scale there and later steps read it).
  "reducer-keeps-decoded-gaps|src/braid/parallel/gradient_reducer.cpp|s/^\( *\)for (const FloatRange\& gap : gaps_\[i\])/\1for (const FloatRange\& gap : std::vector<FloatRange>{})/|parallel_codec_strategies_test|Codecs/CodecUnderZero.StagesOneAndTwoEqualDdpWithTheSameCodecBitwise/6"
  # ... priority scheduling never picks by priority (first-in-first-out in pieces) ...
  "priority-never-overtakes|src/braid/parallel/gradient_reducer.cpp|s/if (everywhere\[k\] > static_cast<float>(n) - 0.5f \&\& unsent(k)) {/if (false \&\& unsent(k)) {/|parallel_ddp_priority_test|DdpPriority.PiecesGoBucketZeroFirstThenTheInputSideFirst"
  # Issue 33, braid plan: the simulator, the planner and strategy auto.
  "plan-pipeline-ignores-sends|src/braid/plan/simulate.cpp|s/      if (k > 0) g.wait(fwd\[parts_\[k\].first\]\[pos\], sent_fwd\[k - 1\]\[pos\]);//|test_plan|Simulate.PipelineBubbleIsTheClosedFormForEqualStages"
  "plan-zero3-no-backward-gather|src/braid/plan/simulate.cpp|s/      if (zero3 \&\& i + 1 < order.size()) {/      if (false) {/|test_plan|Simulate.ZeroMovesDdpBytesThenHalfAgainAtStageThree"
  "plan-activations-of-one-micro-batch|src/braid/plan/simulate.cpp|s/const int held = std::max(1, parallel::in_flight(actions, part.chunk));/const int held = std::min(1, parallel::in_flight(actions, part.chunk));/|test_plan|Simulate.OneFOneBHoldsPMicroBatchesGpipeHoldsM"
  "plan-ddp-reduces-after-backward|src/braid/plan/simulate.cpp|s/{final_backward(u)}, \"reduce bucket\"/{final_backward(order.back())}, \"reduce bucket\"/|test_plan|Simulate.DdpOverlapsALaterBucketWithEarlierBackwards"
  "plan-cores-shared-while-idle|src/braid/plan/simulate.cpp|s/  if (cluster.compute_speed == 0 \&\& shared < 1) {/  if (false) {/|test_plan|Simulate.RanksThatIdleLeaveTheirCoresToTheOthers"
  "plan-ranks-what-does-not-fit|src/braid/plan/planner.cpp|s/    if (a.prediction.fits != b.prediction.fits) return a.prediction.fits;//|test_plan|Planner.NeverProposesAConfigurationOverTheMemory"
  "plan-auto-ignored|src/braid/cli/plan_auto.cpp|s/  if (config.strategy != \"auto\"/  if (config.strategy == \"auto\"/|test_cli|PlanCli.StrategyAutoTrainsWhatThePlanChose"
)
list=0 baseline=0 keep_going=0
while getopts "lbkh" opt; do
  case "$opt" in
    l) list=1 ;;
    b) baseline=1 ;;
    k) keep_going=1 ;;
    *) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
shift $((OPTIND - 1))

field() { cut -d'|' -f"$2" <<<"$1"; }
# The entry's test regex: everything from field 5 on (a regex may hold '|').
regex_of() { cut -d'|' -f5- <<<"$1"; }

if ((list)); then
  for m in "${MUTATIONS[@]}"; do
    printf '%-30s %-42s %s\n' "$(field "$m" 1)" "$(field "$m" 2)" "$(regex_of "$m")"
  done
  exit 0
fi

selected=()
for m in "${MUTATIONS[@]}"; do
  if (($# == 0)); then selected+=("$m"); continue; fi
  for want in "$@"; do [ "$(field "$m" 1)" = "$want" ] && selected+=("$m"); done
done
if ((${#selected[@]} == 0)); then
  echo "mutate.sh: no mutation named $* (scripts/mutate.sh -l lists them)" >&2
  exit 2
fi

backup_dir=$(mktemp -d)
mutated=""  # the file now mutated, if any
restore() {
  if [ -n "$mutated" ]; then
    cp "$backup_dir/file" "$mutated"
    echo "mutate.sh: restored $mutated"
    mutated=""
  fi
}
cleanup() {
  restore
  rm -rf "$backup_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

run_test() {  # target regex log -> 0 when the test passed
  local target=$1 regex=$2 log=$3
  if ! scripts/build.sh release "$target" >"$log" 2>&1; then return 2; fi
  ctest --test-dir "$BUILD" -R "$regex" --no-tests=error --output-on-failure --timeout 300 \
    >>"$log" 2>&1
}

status=0
results=()
for m in "${selected[@]}"; do
  name=$(field "$m" 1) file=$(field "$m" 2) expr=$(field "$m" 3) target=$(field "$m" 4)
  regex=$(regex_of "$m")
  log="$backup_dir/$name.log"
  echo "== $name: $file -> $target -R '$regex'"
  if ! git diff --quiet HEAD -- "$file"; then
    echo "mutate.sh: $file has uncommitted changes; commit or stash them first" >&2
    exit 2
  fi
  if ((baseline)); then
    if ! run_test "$target" "$regex" "$log"; then
      results+=("$(printf '%-30s %s' "$name" "BASELINE FAILS (unmutated; see below)")")
      tail -40 "$log"
      status=1
      ((keep_going)) && continue
      break
    fi
  fi
  cp "$file" "$backup_dir/file"
  mutated=$file
  sed -i "$expr" "$file"
  if cmp -s "$file" "$backup_dir/file"; then
    restore
    results+=("$(printf '%-30s %s' "$name" "NOT APPLIED (the sed expression matched nothing)")")
    status=1
    ((keep_going)) && continue
    break
  fi
  git --no-pager diff --stat -- "$file" | head -1
  set +e
  run_test "$target" "$regex" "$log"
  rc=$?
  set -e
  restore
  case $rc in
    0) verdict="SURVIVED"; status=1; tail -20 "$log" ;;
    2) verdict="DOES NOT BUILD"; status=1; grep -m5 -A3 "error" "$log" || tail -20 "$log" ;;
    *) verdict="killed"; grep -m3 "Failure\|FAILED\|\*\*\*" "$log" || true ;;
  esac
  results+=("$(printf '%-30s %s' "$name" "$verdict")")
  echo "   $verdict"
  if [ "$verdict" = "DOES NOT BUILD" ] && ((!keep_going)); then break; fi
done

echo
echo "== mutations"
printf '%s\n' "${results[@]}"
exit $status
