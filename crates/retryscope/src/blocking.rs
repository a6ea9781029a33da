//! Retrying blocking operations: [`Retry::call`].

use crate::classify::Classify;
use crate::clock::{Clock, SystemClock};
use crate::error::RetryError;
use crate::observe::Observer;
use crate::retry::{Notify, Retry, Step, final_result, settle};
use std::time::Duration;

impl<Op, T, E, C, O, N> Retry<'_, Op, C, O, N>
where
    Op: FnMut() -> Result<T, E>,
    C: Classify<T, E>,
    O: Observer,
    N: Notify<E>,
{
    /// Runs a blocking operation until it succeeds or the policy gives up,
    /// sleeping the thread between attempts.
    ///
    /// A blocking call cannot be interrupted, so the per-attempt timeout is not
    /// enforced; the deadline is checked before each attempt and no wait crosses it.
    ///
    /// ```
    /// use retryscope::{Policy, Retryable};
    /// use std::time::Duration;
    ///
    /// let policy = Policy::builder().base_delay(Duration::from_millis(1)).build()?;
    /// let mut tries = 0;
    /// let value = (|| {
    ///     tries += 1;
    ///     if tries < 2 { Err("flaky") } else { Ok(tries) }
    /// })
    /// .retry(policy)
    /// .retry_any_error()
    /// .call();
    /// assert_eq!(value.unwrap(), 2);
    /// # Ok::<(), retryscope::PolicyError>(())
    /// ```
    pub fn call(self) -> Result<T, RetryError<E>> {
        self.call_with(&SystemClock, std::thread::sleep)
    }

    /// Like [`call`](Self::call), reading time from `clock` and waiting with
    /// `sleep`: tests pass a [`ManualClock`](crate::clock::ManualClock) and a sleep
    /// that advances it.
    pub fn call_with(self, clock: &impl Clock, mut sleep: impl FnMut(Duration)) -> Result<T, RetryError<E>> {
        let (mut op, mut classifier, mut notify, mut driver) = self.into_parts(clock);
        let mut last = None;
        loop {
            let now = driver.now();
            // A blocking call cannot be cut short: its time limit is not enforced.
            if driver.paced() {
                match driver.pace(now) {
                    Ok(None) => {}
                    Ok(Some(wait)) => {
                        sleep(wait);
                        continue;
                    }
                    Err(reason) => return final_result(&driver, reason, last),
                }
            }
            let quiet = match driver.start_attempt(now) {
                Ok(started) => started.quiet,
                Err(reason) => return final_result(&driver, reason, last),
            };
            let result = driver.in_scope(&mut op);
            match settle(&mut driver, &mut classifier, &mut notify, result, quiet) {
                Step::Finished(output) => return output,
                Step::Wait { delay, last: failed } => {
                    last = failed;
                    if !delay.is_zero() {
                        sleep(delay);
                    }
                }
            }
        }
    }
}
