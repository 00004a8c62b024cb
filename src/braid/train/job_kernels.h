// How a job chooses its kernels (the GEMM method of each shape, core/gemm_choice.h; the
// convolution algorithm of each geometry, nn/conv_choice.h): once per job, alike on every
// rank, and in deterministic mode the same in every run and at every world size.
//
// start_job_kernels(config, world) runs in every process of the job as it starts, before
// any product (the trainer's init, a parameter server's start):
//  1. the OnMiss of shapes no table holds (core/choice_table.h): deterministic: rule;
//     several ranks: rule_and_measure (plain rule without a kernel cache, where nobody
//     would keep the timing); one process alone: measure.
//  2. rank 0 (or a process alone) starts its tables from the kernel cache
//     (train/kernel_cache.h), unless deterministic;
//  3. every rank applies config.kernel_choices, a record to replay (over the cache);
//  4. rank 0's tables are broadcast over `world` and every rank takes them.
// A checkpoint's record applied on --resume comes later, alike on every rank.
//
// Why:
//  - Ranks must multiply alike for every shape any of them meets, also shapes first met
//    late (an evaluation's last batch, a pipeline stage's activations that other ranks
//    never see). Timing a shape on the rank that meets it lets ranks differ; agreeing on it
//    when first met needs every rank to meet it. So the table is fixed when the job starts
//    (rank 0's, from the shapes earlier jobs measured), and a shape outside it is decided
//    by a fixed rule, which every rank applies alike without a message. Its timing still
//    happens (rule_and_measure), and goes to the cache for the next job.
//  - Deterministic mode leaves the cache out: a cache grows as jobs run (another model, an
//    evaluation shape), so a run that read it could differ from the same run yesterday.
//    The rule alone gives one run's bits whatever ran before, at every world size, with
//    nothing timed; it costs the rule's speed (within 5 % of the timed choices on the mlp
//    and the cnn on Zen 4). A record given (kernel_choices, --resume) is still obeyed:
//    it is an input of the run.
//  - A process alone times a new shape and uses the timing at once, as before; its
//    choices go to the cache, so the next identical run chooses alike.
//  - Ranks on other hosts take rank 0's table too (alike matters more than a faster pick
//    for another CPU); what they time goes to their own host's cache.
//  - The cache keeps the first timing of a shape (a timing taken on a busy machine stays
//    until the file is deleted): a choice that changed from job to job would change a
//    job's bits from the last's.
//
// save_kernel_measurements() (kernel_cache.h) keeps the timings: the trainer calls it after
// its first step and after each evaluation.
#pragma once

#include "comm/group.h"
#include "train/config.h"

namespace braid::train {

// `world`: the job's world group (every process of the job calls this at the same point),
// or null for a process alone.
void start_job_kernels(const TrainConfig& config, comm::Group* world);

}  // namespace braid::train
