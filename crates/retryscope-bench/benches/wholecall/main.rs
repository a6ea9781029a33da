//! Whole instrumented calls, as a user makes them: instructions and
//! allocations per call of plain reqwest, its retry peers and retryscope (with
//! and without the OpenTelemetry SDK), of a hand-rolled span + counter +
//! histogram, and the tonic equivalents, each against a real server running in
//! another process.
//!
//! - `wholecall` lists the variants (each runs in a process of its own, and a
//!   variant whose call does not end as expected fails its run);
//! - `wholecall serve-http` / `serve-grpc` are the servers ([`servers`]): the
//!   client spawns them itself, so callgrind, which traces only the process it
//!   starts, never counts them;
//! - `wholecall VARIANT` makes [`WARM_UP`] calls, then [`CALLS`] inside the
//!   function `measured`, which `scripts/wholecall.sh` runs under
//!   `valgrind --tool=callgrind --toggle-collect='*wholecall*measured*'`, and
//!   prints the allocations the measured calls made on the client thread;
//! - `wholecall paired FAMILY` (`http`, `grpc`) counts the plain, code-built
//!   and configured clients of a family in one process, their calls in turns,
//!   in `measured_plain`, `measured_code` and `measured_configured` ([`Paired`]),
//!   the code-built client built first (`code-first`, the default) or the
//!   configured one (`configured-first`);
//! - `wholecall wall VARIANT` times batches of the variant and of its plain
//!   call alternately and prints the median of their ratios (BENCHMARKS.md);
//! - `wholecall reload-load` is the reload-under-load run ([`reload_load`]),
//!   which scripts/wholecall.sh runs after the counts.
//!
//! Every call of the client runs on one thread: a current-thread tokio
//! runtime, driven by `block_on` inside `measured`, so the connection tasks
//! reqwest and tonic spawn run there too, and an IP-literal URL keeps DNS off
//! the blocking pool. What runs elsewhere is the SDK's export threads, which
//! are not part of a call.

mod alloc;
mod grpc;
mod http;
mod reload_load;
mod servers;
mod telemetry;
mod variants;

use servers::Servers;
use std::error::Error;
use std::time::Instant;
use tokio::runtime::Runtime;

/// Calls counted per variant: the count per call is the total over this.
const CALLS: u64 = 2_000;

/// Calls made before counting: connections open, pools, caches and the SDK's
/// instruments are created, and every lazy path has been taken once.
const WARM_UP: u64 = 200;

/// The error of a call that did not end as the variant expects.
pub(crate) type CallError = Box<dyn Error + Send + Sync>;

/// One logical call of a variant.
pub(crate) trait Caller {
    /// Makes call number `n`: the failing server's script is keyed by it, so
    /// each logical call fails once whatever its retries do.
    async fn call(&mut self, n: u64) -> Result<(), CallError>;
}

/// What to do with a variant once it is built: generic over the caller, so
/// each variant's calls are compiled (and counted) without dynamic dispatch.
pub(crate) trait Job {
    /// Runs the job with `caller`, on `runtime`.
    fn run<C: Caller>(self, runtime: &Runtime, caller: C) -> Result<(), CallError>;
}

/// The measured loop: not inlined, so callgrind's `--toggle-collect` counts
/// exactly it and what it calls on this thread. Returns the allocations made.
#[inline(never)]
fn measured<C: Caller>(runtime: &Runtime, caller: &mut C, first: u64) -> Result<u64, CallError> {
    let before = alloc::allocations();
    runtime.block_on(async {
        for n in first..first + CALLS {
            caller.call(n).await?;
        }
        Ok::<(), CallError>(())
    })?;
    Ok(alloc::allocations() - before)
}

/// Counts one variant: warm-up, then the measured calls.
struct Count {
    name: String,
}

impl Job for Count {
    fn run<C: Caller>(self, runtime: &Runtime, mut caller: C) -> Result<(), CallError> {
        runtime.block_on(async {
            for n in 0..WARM_UP {
                caller.call(n).await?;
            }
            Ok::<(), CallError>(())
        })?;
        let allocations = measured(runtime, &mut caller, WARM_UP)?;
        // One line for scripts/wholecall.sh: name, calls, allocations.
        println!("{} {CALLS} {allocations}", self.name);
        Ok(())
    }
}

/// Wall-time ratio of a variant to its plain call, on one thread.
struct Wall<P> {
    plain: P,
    rounds: usize,
    batch: u64,
}

impl<P: Caller> Job for Wall<P> {
    fn run<C: Caller>(mut self, runtime: &Runtime, mut caller: C) -> Result<(), CallError> {
        let mut n = 0;
        let mut ratios = Vec::with_capacity(self.rounds);
        runtime.block_on(async {
            for _ in 0..WARM_UP {
                self.plain.call(n).await?;
                caller.call(n + 1).await?;
                n += 2;
            }
            for round in 0..self.rounds {
                // Alternate which goes first, so a drift in the machine's speed
                // within a round weighs on both alike.
                let mut plain = 0.0;
                let mut variant = 0.0;
                for turn in 0..2 {
                    let started = Instant::now();
                    if (round + turn) % 2 == 0 {
                        for _ in 0..self.batch {
                            self.plain.call(n).await?;
                            n += 1;
                        }
                        plain = started.elapsed().as_secs_f64();
                    } else {
                        for _ in 0..self.batch {
                            caller.call(n).await?;
                            n += 1;
                        }
                        variant = started.elapsed().as_secs_f64();
                    }
                }
                ratios.push(variant / plain);
            }
            Ok::<(), CallError>(())
        })?;
        ratios.sort_by(f64::total_cmp);
        let median = ratios[ratios.len() / 2];
        println!(
            "{median:.3} {:.3} {:.3}",
            ratios[ratios.len() / 10],
            ratios[ratios.len() - 1 - ratios.len() / 10]
        );
        Ok(())
    }
}

/// Given the plain call of `variant`'s family, builds the variant and runs
/// the wall job.
struct WallOf<'a> {
    variant: &'a str,
    servers: &'a Servers,
    rounds: usize,
    batch: u64,
}

impl Job for WallOf<'_> {
    fn run<C: Caller>(self, runtime: &Runtime, plain: C) -> Result<(), CallError> {
        let wall = Wall { plain, rounds: self.rounds, batch: self.batch };
        variants::with_variant(self.variant, self.servers, runtime, wall)
    }
}

/// One call of the plain client in a paired run, in a function of its own
/// so that callgrind's inclusive count of it is this client's calls alone.
#[inline(never)]
fn measured_plain<C: Caller>(runtime: &Runtime, caller: &mut C, n: u64) -> Result<(), CallError> {
    runtime.block_on(caller.call(n))
}

/// One call of the client built in code, in a paired run.
#[inline(never)]
fn measured_code<C: Caller>(runtime: &Runtime, caller: &mut C, n: u64) -> Result<(), CallError> {
    runtime.block_on(caller.call(n))
}

/// One call of the client configured from a file, in a paired run.
#[inline(never)]
fn measured_configured<C: Caller>(runtime: &Runtime, caller: &mut C, n: u64) -> Result<(), CallError> {
    runtime.block_on(caller.call(n))
}

/// A paired run: the plain client, the one built in code and the configured
/// one, in one process, their calls taken in turn, so that all three are
/// served by one heap in one state (in processes of their own, what the
/// file's parse left behind moves glibc's bins by hundreds of instructions
/// a call, either way). Built as nested jobs: plain, then the code-built and
/// the configured client in the order `configured_first` says. Which is built
/// first places its connection's buffers and tasks first in the heap, which
/// moves the allocator's share of its calls: `scripts/wholecall.sh` runs both
/// orders and adds them up, so that the order favours neither.
struct Paired<'a> {
    family: &'a str,
    servers: &'a Servers,
    configured_first: bool,
}

impl Paired<'_> {
    fn variant(&self, configured: bool) -> String {
        match configured {
            true => format!("{}_retryscope_configured", self.family),
            false => format!("{}_retryscope", self.family),
        }
    }
}

struct PairedSecond<'a, P> {
    paired: Paired<'a>,
    plain: P,
}

struct PairedAll<P, Q> {
    configured_first: bool,
    plain: P,
    first: Q,
}

impl Job for Paired<'_> {
    fn run<C: Caller>(self, runtime: &Runtime, plain: C) -> Result<(), CallError> {
        let first = self.variant(self.configured_first);
        let servers = self.servers;
        variants::with_variant(&first, servers, runtime, PairedSecond { paired: self, plain })
    }
}

impl<P: Caller> Job for PairedSecond<'_, P> {
    fn run<C: Caller>(self, runtime: &Runtime, first: C) -> Result<(), CallError> {
        let second = self.paired.variant(!self.paired.configured_first);
        let job = PairedAll { configured_first: self.paired.configured_first, plain: self.plain, first };
        variants::with_variant(&second, self.paired.servers, runtime, job)
    }
}

impl<P: Caller, Q: Caller> Job for PairedAll<P, Q> {
    fn run<C: Caller>(self, runtime: &Runtime, second: C) -> Result<(), CallError> {
        match self.configured_first {
            true => paired_rounds(runtime, self.plain, second, self.first),
            false => paired_rounds(runtime, self.plain, self.first, second),
        }
    }
}

/// The paired run's calls: warm-up, then [`CALLS`] rounds of one call each.
fn paired_rounds<P: Caller, Q: Caller, R: Caller>(
    runtime: &Runtime,
    mut plain: P,
    mut code: Q,
    mut configured: R,
) -> Result<(), CallError> {
    let mut n = 0;
    for _ in 0..WARM_UP {
        runtime.block_on(plain.call(n))?;
        runtime.block_on(code.call(n + 1))?;
        runtime.block_on(configured.call(n + 2))?;
        n += 3;
    }
    let before = alloc::allocations();
    for round in 0..CALLS {
        // The plain call first, then the other two in turns: what a call
        // leaves for the runtime to finish (a connection's next read)
        // is counted in the next, so neither is always after the other.
        measured_plain(runtime, &mut plain, n)?;
        if round % 2 == 0 {
            measured_code(runtime, &mut code, n + 1)?;
            measured_configured(runtime, &mut configured, n + 2)?;
        } else {
            measured_configured(runtime, &mut configured, n + 1)?;
            measured_code(runtime, &mut code, n + 2)?;
        }
        n += 3;
    }
    println!("paired {CALLS} {}", alloc::allocations() - before);
    Ok(())
}

fn runtime() -> Runtime {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => fail(&format!("no tokio runtime: {error}")),
    }
}

fn fail(message: &str) -> ! {
    eprintln!("wholecall: {message}");
    std::process::exit(1);
}

fn main() {
    // `cargo bench` passes `--bench`; the script passes the mode or variant.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let outcome = match args.as_slice() {
        ["serve-http"] => servers::serve_http(),
        ["serve-grpc"] => servers::serve_grpc(),
        ["reload-load", rest @ ..] => reload_load::run(rest),
        [] => {
            // One process per variant (the SDK is installed once per process),
            // so listing is all this does; a variant that fails fails its run.
            variants::NAMES.iter().for_each(|name| println!("{name}"));
            Ok(())
        }
        ["wall", variant, rest @ ..] => Servers::start().and_then(|servers| {
            let number = |i: usize, default: u64| rest.get(i).and_then(|s| s.parse().ok()).unwrap_or(default);
            let job = WallOf {
                variant,
                servers: &servers,
                rounds: usize::try_from(number(0, 31)).unwrap_or(31),
                batch: number(1, 200),
            };
            variants::with_variant(variants::plain_of(variant), &servers, &runtime(), job)
        }),
        ["paired", family, order @ ..] if order.len() <= 1 => Servers::start().and_then(|servers| {
            let configured_first = match order {
                [] | ["code-first"] => false,
                ["configured-first"] => true,
                _ => fail("paired: the order is code-first (the default) or configured-first"),
            };
            let job = Paired { family, servers: &servers, configured_first };
            variants::with_variant(&format!("{family}_plain"), &servers, &runtime(), job)
        }),
        [variant] => Servers::start().and_then(|servers| {
            variants::with_variant(variant, &servers, &runtime(), Count { name: (*variant).to_owned() })
        }),
        _ => fail(
            "usage: wholecall [VARIANT | paired http|grpc [code-first|configured-first] | wall VARIANT [ROUNDS [BATCH]] | reload-load [SECONDS [RATE [REWRITES]]] \
             | serve-http | serve-grpc]",
        ),
    };
    if let Err(error) = outcome {
        fail(&error.to_string());
    }
}
