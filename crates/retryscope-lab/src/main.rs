//! `retryscope`: the storm lab's command line.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Show, with numbers and pictures, what a retry policy does to a struggling service.
#[derive(Debug, Parser)]
#[command(name = "retryscope", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A live retry storm on loopback: every policy against the same struggling server.
    Storm(Box<retryscope_lab::storm::StormArgs>),
    /// Deterministic simulations in virtual time that reproduce published experiments.
    Simulate(retryscope_lab::sim::SimulateArgs),
    /// Job queues (retryscope-jobs on NATS JetStream): `jobs dead-letters list|inspect|replay`.
    Jobs(retryscope_lab::jobs::JobsArgs),
    /// Checks a retryscope-config file (TOML or JSON) and prints the effective table, one row per dependency.
    CheckConfig(retryscope_lab::check_config::CheckConfigArgs),
    /// Reads a service's retryscope series from Prometheus and writes a reviewed configuration file.
    Advise(Box<retryscope_lab::advise::AdviseArgs>),
    /// One replica of `storm --rate-limited --replicas N`, started by it.
    #[command(hide = true)]
    FleetReplica(Box<retryscope_lab::storm::rate_limited::fleet::replica::ReplicaArgs>),
}

/// The error and its sources, outermost first, as one line: "context: cause: cause's cause".
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    std::iter::successors(Some(error), |&e| e.source())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Storm(args) if args.rate_limited && args.replicas.is_some() => {
            let replicas = args.replicas.unwrap_or_default();
            retryscope_lab::storm::rate_limited::run_fleet(&args, replicas).map(drop).map_err(|e| chain(&e))
        }
        Command::FleetReplica(args) => {
            retryscope_lab::storm::rate_limited::fleet::replica::run(&args).map_err(|e| chain(&e))
        }
        Command::Storm(args) if args.rate_limited => {
            retryscope_lab::storm::rate_limited::run(&args).map(drop).map_err(|e| chain(&e))
        }
        Command::Storm(args) if args.slow_tail => {
            retryscope_lab::storm::slow_tail::run(&args).map(drop).map_err(|e| chain(&e))
        }
        Command::Storm(args) if args.lost_responses => {
            retryscope_lab::storm::lost_responses::run(&args).map(drop).map_err(|e| chain(&e))
        }
        Command::Storm(args) if args.jobs => {
            retryscope_lab::storm::jobs::run(&args).map(drop).map_err(|e| chain(&e))
        }
        Command::Storm(args) if args.chaos.is_some() => {
            retryscope_lab::storm::chaos::run(&args).map(drop).map_err(|e| chain(&e))
        }
        Command::Storm(args) if args.layers.is_some() => {
            retryscope_lab::storm::layers::run(&args).map(drop).map_err(|e| chain(&e))
        }
        Command::Storm(args) => retryscope_lab::storm::run(&args).map(drop).map_err(|e| chain(&e)),
        Command::Advise(args) => retryscope_lab::advise::run(&args)
            .map(|report| {
                let p = &report.paths;
                println!("wrote {} ({} dependencies)", p.config.display(), report.advice.len());
                for path in [&p.json, &p.svg].into_iter().flatten() {
                    println!("wrote {}", path.display());
                }
                print!("{}", retryscope_lab::advise::replay::table(&report.replays));
                println!("the replay's assumptions:");
                for a in retryscope_lab::advise::replay::ASSUMPTIONS {
                    println!("- {a}");
                }
            })
            .map_err(|e| chain(&e)),
        Command::Simulate(args) => retryscope_lab::sim::run(&args).map_err(|e| chain(&e)),
        Command::Jobs(args) => retryscope_lab::jobs::run(&args).map_err(|e| chain(&e)),
        // The refusal alone: its Display names file, line, column and range; the
        // engine error it keeps as a source says the same again.
        Command::CheckConfig(args) => {
            retryscope_lab::check_config::run(&args).map(|table| print!("{table}")).map_err(|e| e.to_string())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("retryscope: {error}");
            ExitCode::FAILURE
        }
    }
}
