//! `retryscope check-config FILE`: checks a retryscope-config file as a
//! service would load it and prints the effective table, one row per
//! dependency with the defaults merged in.

use clap::Args;
use retryscope_config::{Config, ConfigError, KnownNames};
use std::path::PathBuf;

/// Arguments of `check-config`.
#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The file (`.toml` or `.json`).
    pub file: PathBuf,
    /// A body rule name the service registers in code (repeatable); a
    /// `body_rule` naming another is refused, as the service would refuse it.
    #[arg(long = "body-rule", value_name = "NAME")]
    pub body_rules: Vec<String>,
    /// A fallback name the service registers in code (repeatable).
    #[arg(long = "fallback", value_name = "NAME")]
    pub fallbacks: Vec<String>,
}

/// Checks the file; the effective table, or the refusal with its line.
pub fn run(args: &CheckConfigArgs) -> Result<String, ConfigError> {
    let known = args.body_rules.iter().fold(KnownNames::new(), |k, n| k.body_rule(n.clone()));
    let known = args.fallbacks.iter().fold(known, |k, n| k.fallback(n.clone()));
    Config::from_path(&args.file, &known).map(|config| config.table())
}
