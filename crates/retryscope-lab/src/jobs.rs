//! `retryscope jobs dead-letters …`: list, inspect and replay the dead
//! letters of a retryscope-jobs queue on NATS JetStream.

use clap::{Args, Subcommand};
use retryscope_jobs::dead::{self, Listed, Replayed};
use retryscope_jobs::meta;
use retryscope_jobs::nats::{NatsQueue, NatsQueueConfig};
use std::fmt;

/// `retryscope jobs`.
#[derive(Debug, Args)]
pub struct JobsArgs {
    #[command(subcommand)]
    command: JobsCommand,
}

#[derive(Debug, Subcommand)]
enum JobsCommand {
    /// The dead letters of a queue.
    DeadLetters(DeadLettersArgs),
}

/// `retryscope jobs dead-letters`.
#[derive(Debug, Args)]
pub struct DeadLettersArgs {
    /// The nats-server.
    #[arg(long, default_value = "nats://127.0.0.1:4222", global = true)]
    nats_url: String,
    /// The job stream (the dead letters are in `<stream>_DEAD` unless --dead-stream says).
    #[arg(long, global = true, default_value = "JOBS")]
    stream: String,
    /// The durable consumer the workers share.
    #[arg(long, global = true, default_value = "workers")]
    consumer: String,
    /// The dead-letter stream, if not `<stream>_DEAD`.
    #[arg(long, global = true)]
    dead_stream: Option<String>,
    /// The dead-letter subject prefix, if not `dead_<stream>`.
    #[arg(long, global = true)]
    dead_prefix: Option<String>,
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// One line per dead letter: id, reason, attempts, key, subject, last error.
    List {
        /// From this id on.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Everything one dead letter holds.
    Inspect {
        /// Its id (from `list`).
        id: u64,
    },
    /// Queues the job again as attempt 1 under its key, then removes the dead letter.
    Replay {
        /// Its id (from `list`).
        id: u64,
    },
}

/// A dead-letter command failed: what it was doing, and the cause.
#[derive(Debug)]
pub struct JobsError {
    context: &'static str,
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl fmt::Display for JobsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.context)
    }
}

impl std::error::Error for JobsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

fn fail(context: &'static str) -> impl FnOnce(retryscope_jobs::BrokerError) -> JobsError {
    move |e| JobsError { context, source: Box::new(e) }
}

/// Runs `retryscope jobs …`, printing to stdout.
pub fn run(args: &JobsArgs) -> Result<(), JobsError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| JobsError { context: "starting the runtime", source: Box::new(e) })?;
    runtime.block_on(async {
        let JobsCommand::DeadLetters(args) = &args.command;
        let client = async_nats::connect(&args.nats_url)
            .await
            .map_err(|e| JobsError { context: "connecting to nats-server", source: Box::new(e) })?;
        let mut config = NatsQueueConfig::new(&args.stream, Vec::<String>::new(), &args.consumer);
        let stream = args.stream.clone();
        config = config.dead_letters(
            args.dead_stream.clone().unwrap_or_else(|| format!("{stream}_DEAD")),
            args.dead_prefix.clone().unwrap_or_else(|| format!("dead_{}", stream.to_ascii_lowercase())),
        );
        let queue = NatsQueue::attach(client, &config).await.map_err(fail("opening the queue"))?;
        match args.action {
            Action::List { from, limit } => {
                let listed = dead::list(&queue, from, limit).await.map_err(fail("listing dead letters"))?;
                println!("{:>8}  {:<22} {:>8}  {:<24} {:<24} last error", "id", "reason", "attempts", "key", "subject");
                for entry in &listed {
                    println!("{}", line(entry));
                }
                println!("{} dead letter(s)", listed.len());
            }
            Action::Inspect { id } => match dead::inspect(&queue, id).await.map_err(fail("reading the dead letter"))? {
                None => println!("no dead letter {id}"),
                Some(Listed { letter: Err(invalid), .. }) => println!("dead letter {id}: unreadable ({invalid})"),
                Some(Listed { letter: Ok(letter), .. }) => {
                    println!("id:            {id}");
                    println!("subject:       {}", letter.subject);
                    println!("key:           {}", letter.meta.key.as_deref().unwrap_or("-"));
                    println!("reason:        {}", letter.reason);
                    println!("attempts:      {}", letter.meta.attempt);
                    println!("replays:       {}", letter.meta.replays);
                    println!("first attempt: {}", letter.meta.first_attempt_at.map_or(0, meta::millis));
                    println!("last attempt:  {}", meta::millis(letter.last_attempt_at));
                    println!("error.type:    {}", letter.error_type.as_deref().unwrap_or("-"));
                    println!("last error:    {}", letter.last_error.as_deref().unwrap_or("-"));
                    println!("traceparent:   {}", letter.traceparent.as_deref().unwrap_or("-"));
                    println!("payload:       {}", String::from_utf8_lossy(&letter.payload));
                }
            },
            Action::Replay { id } => match dead::replay(&queue, id).await.map_err(fail("replaying"))? {
                Replayed::Queued { published, key, replays } => println!(
                    "replayed dead letter {id}: key {}, queued as attempt 1 (stream sequence {}), replay #{replays}",
                    key.as_deref().unwrap_or("-"),
                    published.sequence
                ),
                Replayed::NotFound => println!("no dead letter {id}"),
                Replayed::Unreadable(invalid) => println!("dead letter {id} is unreadable ({invalid}): not replayed"),
            },
        }
        Ok(())
    })
}

fn line(entry: &Listed) -> String {
    match &entry.letter {
        Ok(l) => format!(
            "{:>8}  {:<22} {:>8}  {:<24} {:<24} {}",
            entry.id,
            l.reason.as_str(),
            l.meta.attempt,
            l.meta.key.as_deref().unwrap_or("-"),
            l.subject,
            l.last_error.as_deref().unwrap_or("-")
        ),
        Err(invalid) => format!("{:>8}  unreadable: {invalid}", entry.id),
    }
}
