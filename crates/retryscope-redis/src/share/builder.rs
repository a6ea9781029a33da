//! Configuring a [`RedisPaceShare`]: the Redis, the quota's name, the
//! heartbeat's deadline, the meter.

use super::*;

/// Configures a [`RedisPaceShare`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct RedisPaceShareBuilder {
    pub(super) client: redis::Client,
    pub(super) quota: String,
    pub(super) timeout: Duration,
    pub(super) meter: Option<Meter>,
}

impl RedisPaceShareBuilder {
    /// The deadline of each heartbeat (default [`DEFAULT_TIMEOUT`], 50 ms):
    /// more than 0 and at most 1 s, else [`build`](Self::build) refuses it.
    /// Past it, the heartbeat counts as failed, and three in a row put this
    /// replica on its own pacing until Redis answers in time again. A gate's
    /// publication or read waits up to [`MAX_TIMEOUT`] whatever this is.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Publishes [`retryscope.pace.shared`](names::PACE_SHARED) per
    /// dependency and counts fallbacks on `meter`.
    pub fn meter(mut self, meter: Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// The share, its background tasks started (a heartbeat, one subscriber
    /// connection): inside a tokio runtime. Redis need not be up: until it
    /// answers, each replica paces alone (as one replica: it never read the
    /// fleet's size). The tasks end when the share is
    /// dropped.
    pub fn build(self) -> Result<Arc<RedisPaceShare>, ShareError> {
        let quota = QuotaName::new(&self.quota)?;
        if self.timeout.is_zero() || self.timeout > MAX_TIMEOUT {
            return Err(ShareError::Timeout(self.timeout));
        }
        let handle = Handle::try_current().map_err(|_| ShareError::NoRuntime)?;
        let config = ConnectionManagerConfig::new()
            // The longest any operation waits: a heartbeat's own deadline
            // is shorter (`State::within`).
            .set_response_timeout(Some(MAX_TIMEOUT))
            // Connecting is in the background, never on a call's path.
            .set_connection_timeout(Some(MAX_TIMEOUT))
            .set_number_of_retries(1);
        let connection = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(ShareError::Redis)?;
        let fallbacks = self.meter.as_ref().map(|meter| {
            meter
                .u64_counter(names::PACE_SHARED_FALLBACKS)
                .with_unit("{fallback}")
                .with_description("Times this process fell back from the fleet's shared pace to its own")
                .build()
        });
        let state = Arc::new(State {
            quota,
            replica: format!("{:016x}", rand::random::<u64>()),
            timeout: self.timeout,
            connection,
            handle: handle.clone(),
            close_gate: redis::Script::new(CLOSE_GATE),
            pacers: Mutex::default(),
            budgets: Mutex::default(),
            gates: Mutex::default(),
            replicas: AtomicU32::new(1),
            heartbeat_ok: AtomicBool::new(false),
            subscribed: AtomicBool::new(false),
            shared: AtomicBool::new(false),
            publishing: AtomicUsize::new(0),
            fallbacks,
            fallbacks_seen: AtomicU32::new(0),
        });
        if let Some(meter) = &self.meter {
            register_gauge(meter, Arc::downgrade(&state));
        }
        handle.spawn(heartbeat(Arc::downgrade(&state)));
        handle.spawn(subscriber(Arc::downgrade(&state), self.client));
        Ok(Arc::new(RedisPaceShare { state }))
    }
}
