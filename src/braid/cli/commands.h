// Each braid subcommand registers itself on the CLI11 app; its callback does the work
// and throws braid errors, which main() turns into exit codes.
#pragma once

#include <CLI/CLI.hpp>

namespace braid::cli {

void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_plot_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_collective_benches(CLI::App& bench);  // under `braid bench`
void add_train_bench(CLI::App& bench);         // under `braid bench`
void add_ps_bench(CLI::App& bench);            // under `braid bench`
void add_serve_bench(CLI::App& bench);         // under `braid bench`
void add_decode_bench(CLI::App& bench);        // under `braid bench`
void add_store_command(CLI::App& app);
void add_launch_command(CLI::App& app);
void add_comm_check_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_worker_command(CLI::App& app);
void add_job_commands(CLI::App& app);  // submit, status, logs, cancel
void add_plan_command(CLI::App& app);

}  // namespace braid::cli
