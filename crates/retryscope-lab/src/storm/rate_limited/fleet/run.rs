//! One policy's run of the fleet: the replica processes started as the lab
//! binary's hidden `fleet-replica`, told what to run over their standard
//! input, read line by line from their standard output (killed when
//! dropped), and their reports merged with the gateway's counts.

use super::*;

/// A replica process: killed when dropped.
struct Replica {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Replica {
    /// Reads lines until one starts with `word`; its rest. Bounded by `timeout`.
    async fn expect(&mut self, word: &str, timeout: Duration) -> Result<String, StormError> {
        let read = async {
            while let Ok(Some(line)) = self.stdout.next_line().await {
                if let Some(rest) = line.strip_prefix(word) {
                    return Some(rest.trim().to_owned());
                }
            }
            None
        };
        match tokio::time::timeout(timeout, read).await {
            Ok(Some(rest)) => Ok(rest),
            Ok(None) => {
                Err(StormError::new(format!("a replica ended before it said {word} (its error is above)")))
            }
            Err(_) => Err(StormError::new(format!("a replica did not say {word} within {timeout:?}"))),
        }
    }
}

pub(super) async fn run_policy(
    args: &StormArgs,
    policy: FleetPolicy,
    replicas: u32,
    quota: Quota,
    shared_url: Option<&str>,
    telemetry: &Telemetry,
) -> Result<FleetRun, StormError> {
    let duration = Duration::from_secs_f64(args.duration);
    let deadline = Duration::from_secs_f64(args.deadline);
    let drain = deadline + Duration::from_secs(1);
    let slices = usize::try_from((duration + drain).as_millis() / SLICE.as_millis()).unwrap_or(0) + 1;
    let mut own_redis = match policy {
        FleetPolicy::SharedRedisDown => Some(
            RedisServer::start(
                "the shared-redis-down policy stops and starts a Redis of its own",
                "--fleet-policies without `shared-redis-down`",
            )
            .await?,
        ),
        _ => None,
    };
    let redis = match policy {
        FleetPolicy::Shared => shared_url.map(str::to_owned),
        FleetPolicy::SharedRedisDown => own_redis.as_ref().map(RedisServer::url),
        _ => None,
    };
    let epoch_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let quota_name = format!("storm-fleet-{}-{epoch_ms}", std::process::id());
    let exe = std::env::current_exe().map_err(|e| error("finding the lab binary", e))?;
    let mut fleet = Vec::new();
    for index in 0..replicas {
        // The clients split as evenly as they go: the first ones take the rest.
        let clients = args.clients / replicas + u32::from(index < args.clients % replicas);
        let mut command = Command::new(&exe);
        command
            .arg("fleet-replica")
            .args(["--policy", policy.name(), "--quota-name", &quota_name])
            .args(["--replicas", &replicas.to_string(), "--clients", &clients.to_string()])
            .args(["--rate", &args.rate.to_string(), "--duration", &args.duration.to_string()])
            .args(["--deadline", &args.deadline.to_string()])
            .args(["--seed", &args.seed.wrapping_add(u64::from(index)).to_string()]);
        if let Some(url) = &redis {
            command.args(["--redis", url]);
        }
        // Replica 0's metrics (its client's, and the share's) for Prometheus:
        // one scrape target shows the fleet's series.
        if let (0, Some(addr)) = (index, &args.replica_prometheus) {
            command.args(["--prometheus", addr, "--linger", &args.linger.to_string()]);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| error("starting a replica", e))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(StormError::new("a replica's standard streams are missing"));
        };
        fleet.push(Replica { child, stdin, stdout: BufReader::new(stdout).lines() });
    }
    for replica in &mut fleet {
        replica.expect("READY", READY_TIMEOUT).await?;
    }
    let gateway =
        Gateway::start(quota, args.quota_headers, slices, IncomingRequests::from_meter(&telemetry.meter))
            .await
            .map_err(|e| error("starting the gateway", e))?;
    let go = format!("GO http://{}/work\n", gateway.addr);
    for replica in &mut fleet {
        replica.stdin.write_all(go.as_bytes()).await.map_err(|e| error("starting a replica's load", e))?;
        replica.stdin.flush().await.map_err(|e| error("starting a replica's load", e))?;
    }
    let outage = async {
        let Some(server) = own_redis.as_mut() else { return Ok(None) };
        let (down, up) = (duration / 3, duration * 2 / 3);
        tokio::time::sleep(down).await;
        server.stop().await;
        eprintln!("storm: redis-server stopped at {:.1} s", down.as_secs_f64());
        tokio::time::sleep(up - down).await;
        server.restart().await?;
        eprintln!("storm: redis-server started again at {:.1} s", up.as_secs_f64());
        Ok::<_, StormError>(Some((down.as_secs_f64(), up.as_secs_f64())))
    };
    let results = async {
        let mut reports = Vec::new();
        for replica in &mut fleet {
            let line = replica.expect("RESULT", duration + drain + Duration::from_secs(15)).await?;
            let report: ReplicaReport =
                serde_json::from_str(&line).map_err(|e| error("reading a replica's report", e))?;
            reports.push(report);
        }
        Ok::<_, StormError>(reports)
    };
    let (redis_down_s, reports) = tokio::join!(outage, results);
    let (redis_down_s, reports) = (redis_down_s?, reports?);
    // The replicas end after their report (replica 0 after its linger); any
    // still running is killed when `fleet` drops.
    for (index, replica) in fleet.iter_mut().enumerate() {
        let wait = Duration::from_secs_f64(args.linger) + Duration::from_secs(5);
        if tokio::time::timeout(wait, replica.child.wait()).await.is_err() {
            eprintln!("storm: replica {index} did not end within {wait:?} of its report: killed");
        }
    }
    drop(fleet);
    drop(own_redis);
    Ok(merge(policy, &gateway, reports, redis_down_s))
}
