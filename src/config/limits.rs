//! The configured limits as the gateway enforces them: each request's (`tollgate.limits` over
//! the defaults of [`Limits`]) and each listener's connections, fitted into the open-file limit
//! (`tollgate.connections`; the limiter itself is `connections`).

use crate::api::limits::Limits;

use super::{ConnectionsConf, LimitsConf, ListenerLimits};

impl LimitsConf {
    /// The configured request limits over the gateway's defaults.
    pub fn resolve(&self) -> Limits {
        let d = Limits::default();
        Limits {
            max_messages: self.max_messages.unwrap_or(d.max_messages),
            max_content_parts: self.max_content_parts.unwrap_or(d.max_content_parts),
            max_embedding_inputs: self.max_embedding_inputs.unwrap_or(d.max_embedding_inputs),
            max_input_tokens: self.max_input_tokens.or(d.max_input_tokens),
            allow_http_urls: self.allow_http_urls.unwrap_or(d.allow_http_urls),
            max_header_count: self.max_header_count.unwrap_or(d.max_header_count),
            max_header_bytes: self
                .max_header_bytes
                .map_or(d.max_header_bytes, |b| b.as_u64()),
            body_timeout: self.body_timeout.unwrap_or(d.body_timeout),
            client_write_timeout: self.client_write_timeout.unwrap_or(d.client_write_timeout),
            idle_timeout: self.idle_timeout.unwrap_or(d.idle_timeout),
        }
    }
}

/// The listeners' limits as they will be enforced, and what had to be lowered to fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    pub public: ListenerLimits,
    pub admin: ListenerLimits,
    /// One line per lowered setting, naming it.
    pub clamped: Vec<String>,
}

/// File handles a full gateway may take: each public connection two (its request's upstream
/// call holds one too), each admin connection one, plus the reserve (store, logs, spool,
/// listeners, runtimes).
pub fn handles_needed(public: &ListenerLimits, admin: &ListenerLimits, reserve: u64) -> u64 {
    (2 * public.max as u64)
        .saturating_add(admin.max as u64)
        .saturating_add(reserve)
}

impl ConnectionsConf {
    /// Both listeners' limits fitted into `open_files` handles (said in the log, with whatever
    /// had to be lowered).
    pub fn fitted(&self, open_files: u64) -> (ListenerLimits, ListenerLimits) {
        let fitted = self.fit(open_files);
        for lowered in &fitted.clamped {
            tracing::warn!(
                "{lowered}, to fit the open-file limit of {open_files} \
                 (2 per public connection, 1 per admin one, {} in reserve)",
                self.reserve_files
            );
        }
        let (p, a) = (fitted.public, fitted.admin);
        tracing::info!(
            "connection limits: public {} ({} per client address), admin {} ({} per client address)",
            p.max,
            p.per_address,
            a.max,
            a.per_address
        );
        (p, a)
    }

    /// Fits the configured limits into `open_files` handles. When they do not fit, the admin
    /// listener keeps its limit up to an eighth of what the reserve leaves, and the public one
    /// gets the rest; each per-address limit stays within its listener's total.
    pub fn fit(&self, open_files: u64) -> Fitted {
        let (mut public, mut admin) = (self.public, self.admin);
        if handles_needed(&public, &admin, self.reserve_files) > open_files {
            let room = open_files.saturating_sub(self.reserve_files);
            admin.max = admin.max.min(usize_of(room / 8).max(1));
            public.max = public
                .max
                .min(usize_of(room.saturating_sub(admin.max as u64) / 2).max(1));
        }
        public.per_address = public.per_address.min(public.max);
        admin.per_address = admin.per_address.min(admin.max);
        let clamped = self.lowered(&public, &admin);
        Fitted {
            public,
            admin,
            clamped,
        }
    }

    /// One line per setting that `public` and `admin` lower.
    fn lowered(&self, public: &ListenerLimits, admin: &ListenerLimits) -> Vec<String> {
        [
            ("public.max", self.public.max, public.max),
            (
                "public.per_address",
                self.public.per_address,
                public.per_address,
            ),
            ("admin.max", self.admin.max, admin.max),
            (
                "admin.per_address",
                self.admin.per_address,
                admin.per_address,
            ),
        ]
        .into_iter()
        .filter(|(_, was, now)| now < was)
        .map(|(name, was, now)| format!("tollgate.connections.{name}: {was} lowered to {now}"))
        .collect()
    }
}

fn usize_of(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn request_limits_keep_the_defaults_left_out() {
        let conf = LimitsConf {
            max_messages: Some(7),
            max_header_bytes: Some(bytesize::ByteSize::kib(4)),
            idle_timeout: Some(Duration::from_secs(5)),
            ..LimitsConf::default()
        };
        let got = conf.resolve();
        assert_eq!(
            got,
            Limits {
                max_messages: 7,
                max_header_bytes: 4096,
                idle_timeout: Duration::from_secs(5),
                ..Limits::default()
            }
        );
        assert_eq!(LimitsConf::default().resolve(), Limits::default());
    }

    fn conf(public: (usize, usize), admin: (usize, usize), reserve: u64) -> ConnectionsConf {
        let limits = |(max, per_address)| ListenerLimits { max, per_address };
        ConnectionsConf {
            public: limits(public),
            admin: limits(admin),
            reserve_files: reserve,
        }
    }

    #[test]
    fn limits_that_fit_are_kept() {
        let c = conf((1_000, 100), (50, 10), 256);
        let fitted = c.fit(2 * 1_000 + 50 + 256);
        assert_eq!((fitted.public, fitted.admin), (c.public, c.admin));
        assert!(fitted.clamped.is_empty());
    }

    #[test]
    fn limits_too_large_for_the_open_files_are_lowered_and_named() {
        let c = conf((16_384, 4_096), (128, 64), 256);
        let fitted = c.fit(1_024);
        // 768 handles beyond the reserve: the admin keeps 96, the public listener 336.
        assert_eq!(
            fitted.admin,
            ListenerLimits {
                max: 96,
                per_address: 64
            }
        );
        assert_eq!(
            fitted.public,
            ListenerLimits {
                max: 336,
                per_address: 336
            }
        );
        assert!(handles_needed(&fitted.public, &fitted.admin, 256) <= 1_024);
        assert_eq!(
            fitted.clamped,
            [
                "tollgate.connections.public.max: 16384 lowered to 336",
                "tollgate.connections.public.per_address: 4096 lowered to 336",
                "tollgate.connections.admin.max: 128 lowered to 96",
            ]
        );
    }

    #[test]
    fn no_room_at_all_still_leaves_each_listener_one_connection() {
        let fitted = conf((100, 10), (10, 10), 256).fit(200);
        let one = ListenerLimits {
            max: 1,
            per_address: 1,
        };
        assert_eq!((fitted.public, fitted.admin), (one, one));
    }

    #[test]
    fn an_unlimited_open_file_limit_keeps_everything() {
        let c = conf((16_384, 4_096), (128, 64), 256);
        assert!(c.fit(u64::MAX).clamped.is_empty());
    }
}
