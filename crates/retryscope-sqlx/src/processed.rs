//! A job's database effect and its "processed" record in one transaction: the
//! processed-jobs table, its schema and migration, and the insert that tells a
//! job's first run from a re-run after a crash.

use sqlx::{Executor, Postgres, Transaction};
use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The processed-jobs table: one row per job key whose effect committed, so
/// that a job run again after its worker crashed finds its key and skips the
/// effect (River's transactional completion, in retryscope's shape).
///
/// A job worker's processed-key store (`retryscope-jobs`' `processed_keys`)
/// records a key when the handler *returns*; a worker killed after its
/// handler's effect and before that runs the job again. With this table the
/// effect and the record of the key commit in the same PostgreSQL transaction:
/// either both are there (a re-run sees [`Recorded::AlreadyProcessed`] and does
/// nothing) or neither is (the re-run does the effect, once).
///
/// In the handler's transaction, first [`record`](Self::record) the job's key,
/// then do the effect only on [`Recorded::Fresh`], then commit:
///
/// ```no_run
/// use retryscope::{Policy, RetryError};
/// use retryscope_sqlx::{Database, Failure, ProcessedJobs, Recorded};
///
/// /// The job's effect, once per job key. In a `retryscope-jobs` handler:
/// /// `ship(&db, &processed, job.key.as_deref().unwrap_or_default(), &job.payload)`.
/// async fn ship(db: &Database, processed: &ProcessedJobs, key: &str, item: &str) -> Result<Recorded, RetryError<Failure>> {
///     db.transaction(Policy::interactive())
///         .operation("ship")
///         .run(|tx| {
///             // Each attempt's future owns what it uses (a clone is a reference count).
///             let (processed, key, item) = (processed.clone(), key.to_owned(), item.to_owned());
///             Box::pin(async move {
///                 // First: the insert takes the key's row lock (see below).
///                 let recorded = processed.record(tx, &key).await?;
///                 if recorded == Recorded::Fresh {
///                     sqlx::query("INSERT INTO shipments (job_key, item) VALUES ($1, $2)")
///                         .bind(&key)
///                         .bind(&item)
///                         .execute(&mut **tx)
///                         .await?;
///                 }
///                 Ok(recorded) // committed with the effect, or with nothing
///             })
///         })
///         .await
/// }
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let db = Database::new(sqlx::PgPool::connect("postgres://app:secret@127.0.0.1:5432/shop").await?);
/// let processed = ProcessedJobs::default(); // `retryscope_processed_jobs`
/// processed.ensure_table(db.pool()).await?; // at start-up, or `schema()` in your migrations
/// ship(&db, &processed, "order-1042", "sku=7").await?;
/// # Ok(()) }
/// ```
///
/// # Why the insert comes first
///
/// `INSERT … ON CONFLICT (job_key) DO NOTHING` is both the check and the
/// record, and it takes the key's row lock. A concurrent run of the same key
/// (a redelivery while the first worker still runs) blocks on that lock in its
/// own insert until the first transaction ends: if it committed, the second
/// insert sees the conflict and inserts nothing ([`Recorded::AlreadyProcessed`]);
/// if it rolled back, the second inserts the key and does the effect. Two runs
/// can never both do the effect. A `SELECT` first would not do: under READ
/// COMMITTED it does not see the other run's uncommitted row, so both would
/// find the key absent and both do the effect.
///
/// # Isolation
///
/// READ COMMITTED — PostgreSQL's default, and the transaction helper's unless
/// [`isolation`](crate::TransactionBuilder::isolation) says otherwise — is
/// enough for this insert-first shape: the blocked insert re-checks the
/// committed row, as above. Under REPEATABLE READ or SERIALIZABLE the blocked
/// insert fails instead with a serialization failure (`40001`, the key
/// committed after its snapshot was taken); the transaction helper runs the
/// whole closure again in a new transaction, whose [`record`](Self::record)
/// then finds the key ([`Recorded::AlreadyProcessed`]). Either way the check
/// runs again with every attempt, because it is inside the closure: an
/// attempt rolled back takes its record with it.
///
/// A COMMIT whose outcome is unknown ([`Failure::CommitOutcomeUnknown`](crate::Failure::CommitOutcomeUnknown))
/// is not run again by the helper; the job can be: its re-run finds the key if
/// the COMMIT went through and does the effect if it did not.
///
/// # The schema
///
/// [`schema`](Self::schema) is the migration, safe to run again (`IF NOT
/// EXISTS`); for the default table:
///
/// ```sql
/// CREATE TABLE IF NOT EXISTS "retryscope_processed_jobs" (
///     job_key text PRIMARY KEY,
///     processed_at timestamptz NOT NULL DEFAULT now()
/// );
/// CREATE INDEX IF NOT EXISTS "retryscope_processed_jobs_processed_at" ON "retryscope_processed_jobs" (processed_at);
/// ```
///
/// The index serves the cleanup, [`forget_older_than`](Self::forget_older_than):
///
/// ```sql
/// DELETE FROM "retryscope_processed_jobs" WHERE processed_at < now() - make_interval(secs => $1)
/// ```
///
/// Keep a key at least as long as its job can still be delivered again: the
/// job stream's retention, and the worker's `key_ttl` (a day by default). A
/// key deleted earlier no longer protects its job's effect.
///
/// ```
/// # use retryscope_sqlx::ProcessedJobs;
/// let processed = ProcessedJobs::default();
/// assert_eq!(
///     processed.schema(),
///     "CREATE TABLE IF NOT EXISTS \"retryscope_processed_jobs\" (\n    job_key text PRIMARY KEY,\n    processed_at timestamptz NOT NULL DEFAULT now()\n);\n\
///      CREATE INDEX IF NOT EXISTS \"retryscope_processed_jobs_processed_at\" ON \"retryscope_processed_jobs\" (processed_at);\n"
/// );
/// assert_eq!(
///     processed.cleanup_statement(),
///     "DELETE FROM \"retryscope_processed_jobs\" WHERE processed_at < now() - make_interval(secs => $1)"
/// );
/// ```
#[derive(Debug, Clone)]
pub struct ProcessedJobs(Arc<Statements>);

/// The table's name and its statements, made once: cloning a
/// [`ProcessedJobs`] into each attempt's future costs a reference count.
#[derive(Debug)]
struct Statements {
    /// The name as given, checked.
    name: String,
    schema: String,
    insert: String,
    cleanup: String,
}

/// What [`ProcessedJobs::record`] found: whether this run is the job's first
/// to commit.
#[must_use = "do the job's effect only on `Recorded::Fresh`"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The key was not there: it is recorded in this transaction, and the
    /// effect belongs in it too.
    Fresh,
    /// A committed transaction recorded the key before: skip the effect, and
    /// the job is done.
    AlreadyProcessed,
}

impl ProcessedJobs {
    /// The table [`Default`] names: `retryscope_processed_jobs`.
    pub const DEFAULT_TABLE: &'static str = "retryscope_processed_jobs";

    /// The longest job key recorded, in bytes: the limit of the job worker's
    /// processed-key store ([`MAX_IDEMPOTENCY_KEY_LEN`](retryscope::classify::MAX_IDEMPOTENCY_KEY_LEN)),
    /// so that every key the worker de-duplicates, the table records.
    pub const MAX_KEY_LEN: usize = retryscope::classify::MAX_IDEMPOTENCY_KEY_LEN;

    /// The longest table name (each part of `schema.table`), in bytes:
    /// PostgreSQL's identifier limit (63) less the index's suffix
    /// (`_processed_at`), so that the index's name is not truncated.
    pub const MAX_NAME_LEN: usize = 63 - INDEX_SUFFIX.len();

    /// The table `name`: `table` or `schema.table`, each part lowercase ASCII
    /// letters, digits and `_`, not starting with a digit, at most
    /// [`MAX_NAME_LEN`](Self::MAX_NAME_LEN) bytes. Anything else is refused
    /// here, so that no unchecked text ever reaches the SQL; the name is
    /// quoted in every statement (a keyword such as `order` is a valid name),
    /// and being lowercase it is the same table your own unquoted SQL names.
    pub fn new(name: &str) -> Result<Self, ProcessedJobsError> {
        let mut parts = name.split('.');
        let (first, second, extra) = (parts.next(), parts.next(), parts.next());
        let invalid = || ProcessedJobsError::InvalidTableName { name: name.to_owned() };
        let (schema, table) = match (first, second, extra) {
            (Some(table), None, None) => (None, table),
            (Some(schema), Some(table), None) => (Some(schema), table),
            _ => return Err(invalid()),
        };
        for part in schema.into_iter().chain([table]) {
            if part.len() > Self::MAX_NAME_LEN {
                return Err(ProcessedJobsError::TableNameTooLong {
                    name: name.to_owned(),
                    limit: Self::MAX_NAME_LEN,
                });
            }
            let mut bytes = part.bytes();
            let starts_well = bytes.next().is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
            if !starts_well || !bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
                return Err(invalid());
            }
        }
        Ok(Self::checked(name, schema, table))
    }

    /// The statements for `schema.table` (`name`), each part already checked:
    /// no quote can be in a part, so quoting cannot be escaped.
    fn checked(name: &str, schema: Option<&str>, table: &str) -> Self {
        let quoted = match schema {
            Some(schema) => format!("\"{schema}\".\"{table}\""),
            None => format!("\"{table}\""),
        };
        // An index is created in its table's schema, and is named without it.
        let index = format!("\"{table}{INDEX_SUFFIX}\"");
        Self(Arc::new(Statements {
            name: name.to_owned(),
            schema: format!(
                "CREATE TABLE IF NOT EXISTS {quoted} (\n    job_key text PRIMARY KEY,\n    \
                 processed_at timestamptz NOT NULL DEFAULT now()\n);\n\
                 CREATE INDEX IF NOT EXISTS {index} ON {quoted} (processed_at);\n"
            ),
            insert: format!("INSERT INTO {quoted} (job_key) VALUES ($1) ON CONFLICT (job_key) DO NOTHING"),
            cleanup: format!("DELETE FROM {quoted} WHERE processed_at < now() - make_interval(secs => $1)"),
        }))
    }

    /// The table's name, as given to [`new`](Self::new).
    pub fn table_name(&self) -> &str {
        &self.0.name
    }

    /// The migration: `CREATE TABLE IF NOT EXISTS` and its index on
    /// `processed_at`, for a migration tool of your own (sqlx's, refinery…).
    pub fn schema(&self) -> &str {
        &self.0.schema
    }

    /// The retention query [`forget_older_than`](Self::forget_older_than)
    /// runs, its age in seconds bound as `$1` (`float8`).
    pub fn cleanup_statement(&self) -> &str {
        &self.0.cleanup
    }

    /// Creates the table and its index if they are not there: the
    /// [`schema`](Self::schema), run in one transaction under an advisory
    /// lock, so that workers starting together do not race on `CREATE TABLE
    /// IF NOT EXISTS` (which two sessions at once can fail with `23505`).
    pub async fn ensure_table<'c, E>(&self, executor: E) -> Result<(), sqlx::Error>
    where
        E: Executor<'c, Database = Postgres>,
    {
        // The simple query protocol runs several statements as one implicit
        // transaction: the lock is held until the index exists.
        let migration = format!("SELECT pg_advisory_xact_lock({MIGRATION_LOCK});\n{}", self.0.schema);
        executor.execute(migration.as_str()).await.map(drop)
    }

    /// Records `key` as processed in `tx`, the transaction the job's effect
    /// runs in: [`Recorded::Fresh`] when this transaction inserted it (do the
    /// effect, then commit), [`Recorded::AlreadyProcessed`] when a committed
    /// one had. Waits while another open transaction holds the same key (see
    /// [why the insert comes first](Self#why-the-insert-comes-first)).
    ///
    /// A key that is empty, longer than [`MAX_KEY_LEN`](Self::MAX_KEY_LEN) or
    /// holds a NUL (which a PostgreSQL `text` cannot) is refused before
    /// anything is sent: `sqlx::Error::Encode` with the [`ProcessedJobsError`]
    /// as its source, which the transaction helper treats as permanent (one
    /// attempt). [`check_key`](Self::check_key) tells it before a transaction.
    pub async fn record(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        key: &str,
    ) -> Result<Recorded, sqlx::Error> {
        Self::check_key(key).map_err(|error| sqlx::Error::Encode(Box::new(error)))?;
        let inserted = sqlx::query(&self.0.insert).bind(key).execute(&mut **tx).await?.rows_affected();
        Ok(if inserted == 1 { Recorded::Fresh } else { Recorded::AlreadyProcessed })
    }

    /// Whether [`record`](Self::record) takes `key`.
    pub fn check_key(key: &str) -> Result<(), ProcessedJobsError> {
        if key.is_empty() {
            Err(ProcessedJobsError::EmptyKey)
        } else if key.len() > Self::MAX_KEY_LEN {
            Err(ProcessedJobsError::KeyTooLong { length: key.len(), limit: Self::MAX_KEY_LEN })
        } else if key.contains('\0') {
            Err(ProcessedJobsError::KeyHasNul)
        } else {
            Ok(())
        }
    }

    /// Deletes the keys processed more than `age` ago (the
    /// [`cleanup_statement`](Self::cleanup_statement)), and says how many.
    /// Run it now and then (a daily task); see the type's docs for how long
    /// a key must be kept.
    pub async fn forget_older_than<'c, E>(&self, executor: E, age: Duration) -> Result<u64, sqlx::Error>
    where
        E: Executor<'c, Database = Postgres>,
    {
        let deleted = sqlx::query(&self.0.cleanup).bind(age.as_secs_f64()).execute(executor).await?;
        Ok(deleted.rows_affected())
    }
}

impl Default for ProcessedJobs {
    /// The table [`DEFAULT_TABLE`](Self::DEFAULT_TABLE), in the connection's
    /// `search_path`.
    fn default() -> Self {
        // A constant that passes `new`'s check (a test says so).
        Self::checked(Self::DEFAULT_TABLE, None, Self::DEFAULT_TABLE)
    }
}

/// What the index's name adds to the table's.
const INDEX_SUFFIX: &str = "_processed_at";

/// The advisory lock [`ProcessedJobs::ensure_table`] takes: `retrysco` in ASCII,
/// one lock for every processed-jobs table (migrations are rare).
const MIGRATION_LOCK: i64 = 0x7265_7472_7973_636f;

/// A processed-jobs table name or a job key refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProcessedJobsError {
    /// The table name is not `table` or `schema.table` of lowercase ASCII
    /// letters, digits and `_`, each part starting with a letter or `_`.
    InvalidTableName {
        /// The name given.
        name: String,
    },
    /// A part of the table name is longer than `limit` bytes.
    TableNameTooLong {
        /// The name given.
        name: String,
        /// [`ProcessedJobs::MAX_NAME_LEN`].
        limit: usize,
    },
    /// The job key is empty: a job without a key cannot be recorded.
    EmptyKey,
    /// The job key is `length` bytes, over `limit`.
    KeyTooLong {
        /// The key's length in bytes.
        length: usize,
        /// [`ProcessedJobs::MAX_KEY_LEN`].
        limit: usize,
    },
    /// The job key holds a NUL character, which PostgreSQL's `text` cannot.
    KeyHasNul,
}

impl fmt::Display for ProcessedJobsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcessedJobsError::InvalidTableName { name } => write!(
                f,
                "processed-jobs table name {name:?} is refused: use `table` or `schema.table`, \
                 lowercase ASCII letters, digits and `_`, not starting with a digit"
            ),
            ProcessedJobsError::TableNameTooLong { name, limit } => {
                write!(
                    f,
                    "processed-jobs table name {name:?} is refused: a part is longer than {limit} bytes"
                )
            }
            ProcessedJobsError::EmptyKey => {
                f.write_str("the job key is empty: a job without a key cannot be recorded")
            }
            ProcessedJobsError::KeyTooLong { length, limit } => {
                write!(f, "the job key is {length} bytes long, over the processed-jobs limit of {limit}")
            }
            ProcessedJobsError::KeyHasNul => {
                f.write_str("the job key holds a NUL character, which PostgreSQL text cannot store")
            }
        }
    }
}

impl Error for ProcessedJobsError {}
