//! `gsched`: graphsched from the command line. Runs the seed pipeline or a graph file with the
//! measuring kernels (every input byte read and checked, every output byte written, each node
//! spinning to its estimate), simulates it, or describes it; prints a table, or one JSON object
//! with `--json`.
//!
//! `cargo run --release --bin gsched -- demo` runs the seed pipeline five ways, from plain malloc
//! to critical-path scheduling under a memory limit, next to the bounds no schedule can beat.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::demo::demo;
use crate::info_cmd::info_command;
use crate::partition_cmd::partition_command;
use crate::plan_cmd::plan_command;
use crate::run_cmd::run_command;
use crate::simulate_cmd::simulate_command;
use crate::tune_cmd::tune_command;

/// Seed pipeline scale of `demo` (and of `run seed`): the five strategies take about 18 s in all
/// on the project's 2-core machine.
pub(crate) const DEMO_SCALE: f64 = 0.3;
/// Seed pipeline scale of `simulate seed` and `info seed`, which touch no memory: the full size.
pub(crate) const FULL_SCALE: f64 = 1.0;

mod args;
mod demo;
mod format;
mod info_cmd;
mod measure;
mod partition_cmd;
mod plan_cmd;
mod run_cmd;
mod simulate_cmd;
mod tune_cmd;
mod workload;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo(args),
        Command::Run(args) => run_command(args),
        Command::Simulate(args) => simulate_command(args),
        Command::Info(args) => info_command(args),
        Command::Plan(args) => plan_command(args),
        Command::Partition(args) => partition_command(args),
        Command::Tune(args) => tune_command(args),
    };
    match result {
        Ok(out) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`gsched info x | head`) is not an error worth a message.
            let _ = stdout.write_all(out.as_bytes()).and_then(|_| stdout.flush());
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("gsched: {message}");
            ExitCode::FAILURE
        }
    }
}
