//! The web console's sessions and sign-ins (`tollgate.console`; enforced by `admin::session`).

use std::time::Duration;

use serde::Deserialize;

/// The longest a session may last: 30 days.
const MAX_SESSION: Duration = Duration::from_secs(30 * 86_400);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConf {
    /// A session unused for this long ends: the operator signs in again.
    #[serde(with = "humantime_serde")]
    pub session_idle: Duration,
    /// A session ends this long after its sign-in, however busy it is.
    #[serde(with = "humantime_serde")]
    pub session_max: Duration,
    /// Sign-in attempts (with the right token or not) allowed per client address and minute;
    /// more are answered 429 with `Retry-After`.
    pub sign_ins_per_minute: u32,
}

impl Default for ConsoleConf {
    fn default() -> Self {
        ConsoleConf {
            session_idle: Duration::from_secs(30 * 60),
            session_max: Duration::from_secs(12 * 3600),
            sign_ins_per_minute: 10,
        }
    }
}

impl ConsoleConf {
    /// What is wrong with these settings, one line each.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.session_idle < Duration::from_secs(1) || self.session_idle > self.session_max {
            problems.push(
                "tollgate.console.session_idle: at least 1s and not above session_max".to_owned(),
            );
        }
        if self.session_max > MAX_SESSION {
            problems.push("tollgate.console.session_max: at most 30d".to_owned());
        }
        if !(1..=1000).contains(&self.sign_ins_per_minute) {
            problems.push("tollgate.console.sign_ins_per_minute: 1 to 1000".to_owned());
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_nonsense_is_named() {
        assert!(ConsoleConf::default().problems().is_empty());
        let bad = ConsoleConf {
            session_idle: Duration::from_secs(13 * 3600),
            session_max: Duration::from_secs(12 * 3600),
            sign_ins_per_minute: 0,
        };
        let problems = bad.problems().join("\n");
        assert!(problems.contains("session_idle"), "{problems}");
        assert!(problems.contains("sign_ins_per_minute"), "{problems}");
    }
}
