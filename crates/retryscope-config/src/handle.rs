//! The live configuration: an atomic snapshot that reloads replace whole.
//! A call takes the snapshot once, at its start, and keeps it to its end;
//! a reload never changes what a call in flight sees.

use crate::config::{Config, ConfigHash, Format, read};
use crate::error::{ConfigError, ConfigErrorKind};
use crate::names::KnownNames;
use arc_swap::ArcSwap;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter, ObservableGauge};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The environment variable naming the configuration file.
pub const CONFIG_ENV: &str = "RETRYSCOPE_CONFIG";

/// The counter of reloads, by `result`.
pub const RELOADS: &str = "retryscope.config.reloads";
/// The gauge that is 1 for the active configuration's hash.
pub const ACTIVE: &str = "retryscope.config.active";
/// The attribute (gauge, spans) carrying the active configuration's hash.
pub const HASH: &str = "retryscope.config.hash";
/// The `result` attribute of [`RELOADS`].
pub const RESULT: &str = "result";

/// The shortest polling interval [`ConfigHandle::watch`] accepts.
pub const MIN_POLL: Duration = Duration::from_millis(50);

/// How long a poll that found the file changed waits before reading it again
/// to confirm the change (see [`ConfigHandle::watch`]).
pub const SETTLE: Duration = Duration::from_millis(20);

struct Inner {
    current: ArcSwap<Config>,
    /// Counts what was put in force, raised after each store: see
    /// [`ConfigHandle::generation`].
    generation: AtomicU64,
    path: Option<PathBuf>,
    known: KnownNames,
    /// The hash of the file's text last read, refused or not: a refused file
    /// is not re-read and re-logged every poll, only when it changes again.
    last_seen: AtomicU64,
    reloads: Counter<u64>,
    _active: ObservableGauge<u64>,
}

/// The configuration in force, shared by every client built from it.
/// Cloning shares it.
#[derive(Clone)]
pub struct ConfigHandle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ConfigHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigHandle")
            .field("hash", &self.snapshot().hash())
            .field("path", &self.inner.path)
            .finish()
    }
}

/// What a reload from the file did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// The text has not changed since it was last read.
    Unchanged,
    /// A new configuration is in force.
    Replaced(ConfigHash),
}

/// Builds a [`ConfigHandle`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct ConfigHandleBuilder {
    known: KnownNames,
    meter: Option<Meter>,
    source: Source,
}

enum Source {
    None,
    Path(PathBuf),
    Env,
    Config(Config),
}

impl ConfigHandleBuilder {
    /// Records `retryscope.config.*` with `meter` instead of the global
    /// meter provider's.
    pub fn meter(mut self, meter: &Meter) -> Self {
        self.meter = Some(meter.clone());
        self
    }

    /// Loads from the file at `path`, which reloads read again.
    pub fn file(mut self, path: impl Into<PathBuf>) -> Self {
        self.source = Source::Path(path.into());
        self
    }

    /// Loads from the file `RETRYSCOPE_CONFIG` names.
    pub fn env(mut self) -> Self {
        self.source = Source::Env;
        self
    }

    /// Starts from `config`, built in code: no file to reload from (reloads
    /// come through [`ConfigHandle::reload_from_str`] or
    /// [`ConfigHandle::replace`]).
    pub fn config(mut self, config: Config) -> Self {
        self.source = Source::Config(config);
        self
    }

    /// Loads and checks the first configuration.
    pub fn build(self) -> Result<ConfigHandle, ConfigError> {
        let known = self.known;
        let load = |p: &Path| -> Result<Config, ConfigError> {
            let text = read(p)?;
            Config::parse(&text, Format::of_path(p)?, &p.display().to_string(), &known)
        };
        let (config, path) = match self.source {
            Source::Config(c) => (c, None),
            Source::Path(p) => (load(&p)?, Some(p)),
            Source::Env => match std::env::var_os(CONFIG_ENV) {
                Some(p) if !p.is_empty() => {
                    let p = PathBuf::from(p);
                    (load(&p)?, Some(p))
                }
                _ => {
                    return Err(ConfigError::new(
                        ConfigErrorKind::NoFile,
                        "",
                        format!("{CONFIG_ENV} is not set: it names the configuration file"),
                    ));
                }
            },
            Source::None => {
                return Err(ConfigError::new(
                    ConfigErrorKind::NoFile,
                    "",
                    "no configuration: give a file, RETRYSCOPE_CONFIG or a Config",
                ));
            }
        };
        // The hash of the file's text, so the first poll finds it unchanged.
        let seen = if path.is_some() { config.hash().0 } else { 0 };
        let meter = self.meter.unwrap_or_else(|| opentelemetry::global::meter("retryscope"));
        let reloads = meter
            .u64_counter(RELOADS)
            .with_description("Configuration reloads, by result (ok, refused)")
            .build();
        Ok(ConfigHandle {
            inner: Arc::new_cyclic(|weak: &Weak<Inner>| {
                let weak = weak.clone();
                let active = meter
                    .u64_observable_gauge(ACTIVE)
                    .with_description("1 for the configuration in force, by its hash")
                    .with_callback(move |obs| {
                        if let Some(inner) = weak.upgrade() {
                            let hash = inner.current.load().hash_str().to_string();
                            obs.observe(1, &[KeyValue::new(HASH, hash)]);
                        }
                    })
                    .build();
                Inner {
                    current: ArcSwap::from_pointee(config),
                    generation: AtomicU64::new(0),
                    path,
                    known,
                    last_seen: AtomicU64::new(seen),
                    reloads,
                    _active: active,
                }
            }),
        })
    }
}

impl ConfigHandle {
    /// A builder checking `body_rule` and `fallback` names against `known`.
    pub fn builder(known: KnownNames) -> ConfigHandleBuilder {
        ConfigHandleBuilder { known, meter: None, source: Source::None }
    }

    /// The configuration in the file `RETRYSCOPE_CONFIG` names.
    pub fn from_env(known: KnownNames) -> Result<ConfigHandle, ConfigError> {
        Self::builder(known).env().build()
    }

    /// The configuration in force now. A call takes it once and keeps it:
    /// a reload during the call does not change what it sees.
    pub fn snapshot(&self) -> Arc<Config> {
        self.inner.current.load_full()
    }

    /// A number that grows each time a configuration is put in force.
    ///
    /// Read before [`snapshot`](Self::snapshot), it lets a client remember
    /// what a fixed target (a gRPC channel's method) resolved to and trust it
    /// while the number stays the same: the snapshot taken after reading it is
    /// the one in force then or a newer one, never an older.
    ///
    /// ```
    /// use retryscope_config::{Config, ConfigHandle, Format, KnownNames};
    ///
    /// let parse = |text| Config::parse(text, Format::Toml, "inline", &KnownNames::new());
    /// let handle = ConfigHandle::builder(KnownNames::new()).config(parse("")?).build()?;
    /// let before = handle.generation();
    /// handle.replace(parse("[defaults]\nattempts = 2\n")?);
    /// assert!(handle.generation() > before);
    /// # Ok::<(), retryscope_config::ConfigError>(())
    /// ```
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }

    /// The file reloads read, if any.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// Puts `config` in force at once.
    pub fn replace(&self, config: Config) {
        let hash = config.hash();
        self.inner.current.store(Arc::new(config));
        // After the store: whoever reads the new number then loads this
        // configuration or a newer one.
        self.inner.generation.fetch_add(1, Ordering::Release);
        self.inner.reloads.add(1, &[KeyValue::new(RESULT, "ok")]);
        tracing::info!(target: "retryscope::config", hash = %hash, "configuration replaced");
    }

    /// Checks `text` and puts it in force; refused, the configuration in
    /// force stays and the refusal is logged and counted.
    pub fn reload_from_str(&self, text: &str, format: Format) -> Result<ConfigHash, ConfigError> {
        match Config::parse(text, format, "<string>", &self.inner.known) {
            Ok(config) => {
                let hash = config.hash();
                self.replace(config);
                Ok(hash)
            }
            Err(e) => Err(self.refused(e)),
        }
    }

    /// Reads the file again (through its name, so a symlink swapped since
    /// is followed) and puts it in force if its text changed since a reload
    /// last read it and it checks; an empty file is refused
    /// ([`ConfigErrorKind::Empty`]). A configuration put in force by
    /// [`replace`](Self::replace) or [`reload_from_str`](Self::reload_from_str)
    /// stays until the file's text changes: reloading an unchanged file
    /// leaves it in force.
    pub fn reload(&self) -> Result<Reload, ConfigError> {
        match self.read_changed()? {
            None => Ok(Reload::Unchanged),
            Some((text, seen)) => self.apply(&text, seen),
        }
    }

    /// The file's text and its hash, if it changed since the last reload.
    fn read_changed(&self) -> Result<Option<(String, ConfigHash)>, ConfigError> {
        let Some(path) = &self.inner.path else {
            return Err(ConfigError::new(
                ConfigErrorKind::NoFile,
                "",
                "this handle was not loaded from a file",
            ));
        };
        let text = match read(path) {
            Ok(t) => t,
            Err(e) => return Err(self.refused(e)),
        };
        let seen = ConfigHash::of(text.as_bytes());
        Ok((self.inner.last_seen.load(Ordering::Acquire) != seen.0).then_some((text, seen)))
    }

    /// Checks `text` (the file's, whose hash is `seen`) and puts it in force.
    fn apply(&self, text: &str, seen: ConfigHash) -> Result<Reload, ConfigError> {
        // Seen, whether it checks or not: a refused text is refused once, and
        // of two reloads that read the same change, one applies it.
        if self.inner.last_seen.swap(seen.0, Ordering::AcqRel) == seen.0 {
            return Ok(Reload::Unchanged);
        }
        let Some(path) = &self.inner.path else { return Ok(Reload::Unchanged) };
        if text.trim().is_empty() {
            // A rewrite in place that takes longer than `SETTLE` between its
            // truncation and its write reads empty twice; loading it would
            // lift every setting (a kill switch too) until the write lands.
            let error = ConfigError::new(
                ConfigErrorKind::Empty,
                "",
                "the file is empty: the configuration in force stays (write a comment to go back to the defaults)",
            );
            return Err(self.refused(error.at(&Arc::from(path.display().to_string()), None)));
        }
        let format = Format::of_path(path)?;
        match Config::parse(text, format, &path.display().to_string(), &self.inner.known) {
            Ok(config) => {
                self.replace(config);
                Ok(Reload::Replaced(seen))
            }
            Err(e) => Err(self.refused(e)),
        }
    }

    /// What a poll does: a changed text is read again after [`SETTLE`] and
    /// put in force only if it is still the same. An editor or `echo >`
    /// rewriting the file in place truncates it first; a poll that read it
    /// then would put an empty (and valid: all defaults) configuration in
    /// force for one poll. A text still changing waits for the next poll; a
    /// file still empty after `SETTLE` (a slower writer) is refused.
    async fn reload_settled(&self) -> Result<Reload, ConfigError> {
        let Some((text, seen)) = self.read_changed()? else { return Ok(Reload::Unchanged) };
        tokio::time::sleep(SETTLE).await;
        match self.read_changed()? {
            Some((again, _)) if again == text => self.apply(&text, seen),
            _ => Ok(Reload::Unchanged),
        }
    }

    fn refused(&self, e: ConfigError) -> ConfigError {
        self.inner.reloads.add(1, &[KeyValue::new(RESULT, "refused")]);
        tracing::error!(
            target: "retryscope::config",
            error = %e,
            hash = %self.snapshot().hash(),
            "configuration reload refused: the last good configuration stays in force"
        );
        e
    }

    /// Polls the file every `every` (at least [`MIN_POLL`]) on the current
    /// tokio runtime, reloading when its text changes. No file-system
    /// notifications: polling through the path sees an in-place edit, a
    /// rename over it and a Kubernetes ConfigMap's `..data` symlink swap
    /// alike. A changed text is put in force only once two reads [`SETTLE`]
    /// apart agree, and never when the file is empty, so a file caught
    /// halfway through an in-place rewrite is never loaded. Stops when the returned [`Watch`] is dropped.
    pub fn watch(&self, every: Duration) -> Watch {
        let weak = Arc::downgrade(&self.inner);
        let every = every.max(MIN_POLL);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                // Refusals are logged and counted by `apply`.
                let _ = ConfigHandle { inner }.reload_settled().await;
            }
        });
        Watch { task }
    }
}

/// The polling task of [`ConfigHandle::watch`]; dropping it stops polling.
#[derive(Debug)]
pub struct Watch {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
