//! `gsched`: graphsched from the command line. Runs the seed pipeline or a graph file with the
//! measuring kernels (every input byte read and checked, every output byte written, each node
//! spinning to its estimate), simulates it, or describes it; prints a table, or one JSON object
//! with `--json`.
//!
//! `cargo run --release --bin gsched -- demo` runs the seed pipeline five ways, from plain malloc
//! to critical-path scheduling under a memory limit, next to the bounds no schedule can beat.

pub(crate) use std::io::{IsTerminal, Write};
pub(crate) use std::path::{Path, PathBuf};
pub(crate) use std::process::ExitCode;
pub(crate) use std::sync::Arc;
pub(crate) use std::time::Duration;

pub(crate) use clap::{Args, Parser, Subcommand, ValueEnum};
pub(crate) use graphsched::plan::{Mode, Order, Plan};
pub(crate) use graphsched::sched::BoundTerm;
pub(crate) use graphsched::sim::{simulate, SimOptions};
pub(crate) use graphsched::{run, Executor, Graph, Policy, Pool, RunOptions, RunResult};
pub(crate) use graphsched_workloads::graph_file::InputBuffers;
pub(crate) use graphsched_workloads::naive::run_naive;
pub(crate) use graphsched_workloads::{checksum, seed_pipeline, GraphFile, Ledger};
pub(crate) use serde::Serialize;
pub(crate) use serde_json::{json, Value};

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
mod plan_cmd;
mod run_cmd;
mod simulate_cmd;
mod workload;

pub(crate) use args::*;
pub(crate) use demo::*;
pub(crate) use format::*;
pub(crate) use info_cmd::*;
pub(crate) use measure::*;
pub(crate) use plan_cmd::*;
pub(crate) use run_cmd::*;
pub(crate) use simulate_cmd::*;
pub(crate) use workload::*;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo(args),
        Command::Run(args) => run_command(args),
        Command::Simulate(args) => simulate_command(args),
        Command::Info(args) => info_command(args),
        Command::Plan(args) => plan_command(args),
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
