//! The schema's history, compiled into the binary so a gateway can migrate its own database
//! at start-up with no files to ship.
//!
//! PostgreSQL and SQLite differ in triggers, identity columns and timestamp types, so each
//! dialect has its own file per version (`sql/postgres/NNNN_name.sql`,
//! `sql/sqlite/NNNN_name.sql`); both lists must name the same versions. Each backend applies,
//! in order and each in its own transaction, the versions not yet recorded in
//! `schema_migrations`, so migrating twice applies nothing the second time.

/// One schema version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// Strictly increasing, starting at 1; recorded in `schema_migrations.version`.
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Which SQL dialect a migration list is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Sqlite,
}

/// PostgreSQL migrations, oldest first.
pub const POSTGRES: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../../sql/postgres/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "usage_source",
        sql: include_str!("../../sql/postgres/0002_usage_source.sql"),
    },
    Migration {
        version: 3,
        name: "price_dimensions",
        sql: include_str!("../../sql/postgres/0003_price_dimensions.sql"),
    },
    Migration {
        version: 4,
        name: "context_window",
        sql: include_str!("../../sql/postgres/0004_context_window.sql"),
    },
    Migration {
        version: 5,
        name: "routing",
        sql: include_str!("../../sql/postgres/0005_routing.sql"),
    },
    Migration {
        version: 6,
        name: "request_id",
        sql: include_str!("../../sql/postgres/0006_request_id.sql"),
    },
    Migration {
        version: 7,
        name: "admin",
        sql: include_str!("../../sql/postgres/0007_admin.sql"),
    },
    Migration {
        version: 8,
        name: "usage_review",
        sql: include_str!("../../sql/postgres/0008_usage_review.sql"),
    },
    Migration {
        version: 9,
        name: "key_rotation",
        sql: include_str!("../../sql/postgres/0009_key_rotation.sql"),
    },
    Migration {
        version: 10,
        name: "model_lifecycle",
        sql: include_str!("../../sql/postgres/0010_model_lifecycle.sql"),
    },
    Migration {
        version: 11,
        name: "aliases_messages",
        sql: include_str!("../../sql/postgres/0011_aliases_messages.sql"),
    },
    Migration {
        version: 12,
        name: "responses",
        sql: include_str!("../../sql/postgres/0012_responses.sql"),
    },
    Migration {
        version: 13,
        name: "route_api",
        sql: include_str!("../../sql/postgres/0013_route_api.sql"),
    },
    Migration {
        version: 14,
        name: "client_addr",
        sql: include_str!("../../sql/postgres/0014_client_addr.sql"),
    },
    Migration {
        version: 15,
        name: "console_sessions",
        sql: include_str!("../../sql/postgres/0015_console_sessions.sql"),
    },
    Migration {
        version: 16,
        name: "keys",
        sql: include_str!("../../sql/postgres/0016_keys.sql"),
    },
    Migration {
        version: 17,
        name: "money",
        sql: include_str!("../../sql/postgres/0017_money.sql"),
    },
    Migration {
        version: 18,
        name: "partitions",
        sql: include_str!("../../sql/postgres/0018_partitions.sql"),
    },
    Migration {
        version: 19,
        name: "ledger_writer",
        sql: include_str!("../../sql/postgres/0019_ledger_writer.sql"),
    },
    Migration {
        version: 20,
        name: "checks",
        sql: include_str!("../../sql/postgres/0020_checks.sql"),
    },
    Migration {
        version: 21,
        name: "spend_log",
        sql: include_str!("../../sql/postgres/0021_spend_log.sql"),
    },
    Migration {
        version: 22,
        name: "ledger_index",
        sql: include_str!("../../sql/postgres/0022_ledger_index.sql"),
    },
];

/// SQLite migrations, oldest first.
pub const SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../../sql/sqlite/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "usage_source",
        sql: include_str!("../../sql/sqlite/0002_usage_source.sql"),
    },
    Migration {
        version: 3,
        name: "price_dimensions",
        sql: include_str!("../../sql/sqlite/0003_price_dimensions.sql"),
    },
    Migration {
        version: 4,
        name: "context_window",
        sql: include_str!("../../sql/sqlite/0004_context_window.sql"),
    },
    Migration {
        version: 5,
        name: "routing",
        sql: include_str!("../../sql/sqlite/0005_routing.sql"),
    },
    Migration {
        version: 6,
        name: "request_id",
        sql: include_str!("../../sql/sqlite/0006_request_id.sql"),
    },
    Migration {
        version: 7,
        name: "admin",
        sql: include_str!("../../sql/sqlite/0007_admin.sql"),
    },
    Migration {
        version: 8,
        name: "usage_review",
        sql: include_str!("../../sql/sqlite/0008_usage_review.sql"),
    },
    Migration {
        version: 9,
        name: "key_rotation",
        sql: include_str!("../../sql/sqlite/0009_key_rotation.sql"),
    },
    Migration {
        version: 10,
        name: "model_lifecycle",
        sql: include_str!("../../sql/sqlite/0010_model_lifecycle.sql"),
    },
    Migration {
        version: 11,
        name: "aliases_messages",
        sql: include_str!("../../sql/sqlite/0011_aliases_messages.sql"),
    },
    Migration {
        version: 12,
        name: "responses",
        sql: include_str!("../../sql/sqlite/0012_responses.sql"),
    },
    Migration {
        version: 13,
        name: "route_api",
        sql: include_str!("../../sql/sqlite/0013_route_api.sql"),
    },
    Migration {
        version: 14,
        name: "client_addr",
        sql: include_str!("../../sql/sqlite/0014_client_addr.sql"),
    },
    Migration {
        version: 15,
        name: "console_sessions",
        sql: include_str!("../../sql/sqlite/0015_console_sessions.sql"),
    },
    Migration {
        version: 16,
        name: "keys",
        sql: include_str!("../../sql/sqlite/0016_keys.sql"),
    },
    Migration {
        version: 17,
        name: "money",
        sql: include_str!("../../sql/sqlite/0017_money.sql"),
    },
    Migration {
        version: 18,
        name: "partitions",
        sql: include_str!("../../sql/sqlite/0018_partitions.sql"),
    },
    Migration {
        version: 19,
        name: "ledger_writer",
        sql: include_str!("../../sql/sqlite/0019_ledger_writer.sql"),
    },
    Migration {
        version: 20,
        name: "checks",
        sql: include_str!("../../sql/sqlite/0020_checks.sql"),
    },
    Migration {
        version: 21,
        name: "spend_log",
        sql: include_str!("../../sql/sqlite/0021_spend_log.sql"),
    },
    Migration {
        version: 22,
        name: "ledger_index",
        sql: include_str!("../../sql/sqlite/0022_ledger_index.sql"),
    },
];

/// The migrations of `dialect`, oldest first.
pub fn migrations(dialect: Dialect) -> &'static [Migration] {
    match dialect {
        Dialect::Postgres => POSTGRES,
        Dialect::Sqlite => SQLITE,
    }
}

/// Creates the bookkeeping table on PostgreSQL (run under the migration lock).
pub const PG_SCHEMA_MIGRATIONS: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version     BIGINT PRIMARY KEY,
    name        TEXT NOT NULL,
    applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
)";

/// Creates the bookkeeping table on SQLite (`applied_at`: Unix microseconds).
pub const SQLITE_SCHEMA_MIGRATIONS: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version     INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    applied_at  INTEGER NOT NULL
) STRICT";

/// Key of the PostgreSQL transaction-level advisory lock that serialises migrators (several
/// replicas starting at once): the ASCII bytes of "tollgate".
pub const PG_MIGRATION_LOCK: i64 = 0x746f_6c6c_6761_7465;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_increase_and_dialects_agree() {
        for dialect in [Dialect::Postgres, Dialect::Sqlite] {
            let list = migrations(dialect);
            assert!(!list.is_empty());
            assert_eq!(list[0].version, 1, "{dialect:?}");
            for pair in list.windows(2) {
                assert!(
                    pair[0].version < pair[1].version,
                    "{dialect:?} {}",
                    pair[1].name
                );
            }
            assert!(list.iter().all(|m| !m.sql.trim().is_empty()));
        }
        let names = |d| {
            migrations(d)
                .iter()
                .map(|m| (m.version, m.name))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(Dialect::Postgres), names(Dialect::Sqlite));
    }
}
