//! Which calls a fault applies to, how often, and the spec that writes both.

use super::error::FaultSpecError;
use super::kind::FaultKind;
use std::fmt;
use std::str::FromStr;

/// How often a rule injects: 0 % to 100 %, to a hundredth of a percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FaultRate(u16);

impl FaultRate {
    /// Every selected call.
    pub const ALWAYS: Self = Self(BASIS_POINTS);
    /// No call.
    pub const NEVER: Self = Self(0);

    /// `percent` of the selected calls (0 to 100, rounded to 0.01 %).
    pub fn percent(percent: f64) -> Result<Self, FaultSpecError> {
        if !(0.0..=100.0).contains(&percent) {
            return Err(FaultSpecError::Rate(percent.to_string()));
        }
        // In range, so the product fits.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "checked above")]
        Ok(Self((percent * 100.0).round() as u16))
    }

    /// In hundredths of a percent (0 to 10,000).
    pub const fn basis_points(self) -> u16 {
        self.0
    }
}

/// 100 % in hundredths of a percent: the range the seeded draw falls in.
pub(crate) const BASIS_POINTS: u16 = 10_000;

impl fmt::Display for FaultRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", f64::from(self.0) / 100.0)
    }
}

/// One fault, its rate, and the calls it selects: a dependency (as the retry
/// layer names it: `host`, or `host:port` off the scheme's port) and a route
/// (a path prefix, matched at `/` boundaries). Unset, each selects every call.
///
/// As a spec: `KIND@PERCENT[@DEPENDENCY][/ROUTE]`, for example `503@10`,
/// `reset@5@payments.internal`, `latency=200ms@20@127.0.0.1:8080/inventory`
/// or `429+retry-after=20@100/search` (see [`FaultKind`]'s kinds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRule {
    pub(crate) kind: FaultKind,
    pub(crate) rate: FaultRate,
    pub(crate) dependency: Option<Box<str>>,
    pub(crate) route: Option<Box<str>>,
}

impl FaultRule {
    /// `kind` at `rate`, for every call.
    pub const fn new(kind: FaultKind, rate: FaultRate) -> Self {
        Self { kind, rate, dependency: None, route: None }
    }

    /// Only calls to `dependency`.
    #[must_use]
    pub fn dependency(mut self, dependency: impl Into<Box<str>>) -> Self {
        self.dependency = Some(dependency.into());
        self
    }

    /// Only calls whose path is `route` or below it (`/inventory` selects
    /// `/inventory` and `/inventory/7`, not `/inventory-old`).
    #[must_use]
    pub fn route(mut self, route: impl Into<Box<str>>) -> Self {
        self.route = Some(route.into());
        self
    }

    /// The fault.
    pub const fn kind(&self) -> FaultKind {
        self.kind
    }

    /// How often.
    pub const fn rate(&self) -> FaultRate {
        self.rate
    }

    /// Whether the rule applies to a call to `dependency` at `path`.
    pub(crate) fn selects(&self, dependency: &str, path: &str) -> bool {
        let dependency_matches = self.dependency.as_deref().is_none_or(|wanted| wanted == dependency);
        let route_matches = self.route.as_deref().is_none_or(|route| {
            let route = route.trim_end_matches('/');
            path.strip_prefix(route).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        });
        dependency_matches && route_matches
    }
}

impl FromStr for FaultRule {
    type Err = FaultSpecError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let (kind, rest) = text.split_once('@').ok_or_else(|| FaultSpecError::Rule(text.to_owned()))?;
        let kind: FaultKind = kind.parse()?;
        // The rate ends at the next `@` (a dependency) or `/` (a route).
        let end = rest.find(['@', '/']).unwrap_or(rest.len());
        let (rate, rest) = rest.split_at(end);
        let percent = rate.trim_end_matches('%');
        let percent: f64 = percent.parse().map_err(|_| FaultSpecError::Rate(rate.to_owned()))?;
        let mut rule = Self::new(kind, FaultRate::percent(percent)?);
        let (dependency, route) = match rest.strip_prefix('@') {
            Some(rest) => match rest.find('/') {
                Some(slash) => (Some(&rest[..slash]), Some(&rest[slash..])),
                None => (Some(rest), None),
            },
            None => (None, Some(rest).filter(|r| !r.is_empty())),
        };
        if let Some(dependency) = dependency {
            if dependency.is_empty() {
                return Err(FaultSpecError::Rule(text.to_owned()));
            }
            rule = rule.dependency(dependency);
        }
        if let Some(route) = route {
            rule = rule.route(route);
        }
        Ok(rule)
    }
}

/// The spec form, which [`FromStr`] reads back.
impl fmt::Display for FaultRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.kind, f64::from(self.rate.0) / 100.0)?;
        if let Some(dependency) = &self.dependency {
            write!(f, "@{dependency}")?;
        }
        if let Some(route) = &self.route {
            f.write_str(route)?;
        }
        Ok(())
    }
}

/// Rules separated by commas, as `retryscope storm --chaos` and configuration
/// take them: `503@10,reset@2@payments.internal`. The first rule that selects a
/// call and draws it injects; a call is injected at most one fault.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultSpec(pub Vec<FaultRule>);

impl FromStr for FaultSpec {
    type Err = FaultSpecError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.split(',')
            .filter(|rule| !rule.trim().is_empty())
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, rule) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{rule}")?;
        }
        Ok(())
    }
}
