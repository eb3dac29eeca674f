//! The `tollgate` command line: argument types, and a `run` that maps each subcommand to one
//! operation of [`commands`](crate::commands) and one rendering (`render`). The operations
//! are shared with the admin API; nothing here changes the store itself.

mod render;

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};

use crate::commands::{self, CommandError, KeyPatch, KeyRequest, ManagementKeyRequest};
use crate::config::{Config, ConfigError};
use crate::server::ServeError;
use crate::store::{self, LimitReset, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Command(#[from] CommandError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Usage(String),
}

#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version,
    about = "OpenAI-compatible LLM gateway on Pingora"
)]
pub struct Cli {
    /// Configuration file.
    #[arg(
        short = 'c',
        long = "conf",
        global = true,
        default_value = "conf/tollgate.yaml"
    )]
    pub conf: PathBuf,
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway (migrates the store and imports the catalog first).
    Serve {
        /// Take over the listeners of a running instance (graceful upgrade).
        #[arg(short = 'u', long)]
        upgrade: bool,
        /// Run in the background.
        #[arg(short = 'd', long)]
        daemon: bool,
    },
    /// Apply pending schema migrations.
    Migrate,
    #[command(subcommand)]
    Workspace(WorkspaceCmd),
    #[command(subcommand)]
    Key(KeyCmd),
    /// Management keys: admin API credentials limited to one workspace's API keys, usage and
    /// balance (for a reseller's backend).
    #[command(subcommand)]
    Mkey(MkeyCmd),
    #[command(subcommand)]
    Credit(CreditCmd),
    #[command(subcommand)]
    Catalog(CatalogCmd),
    /// A workspace's usage records (oldest first), or `usage archive` / `usage restore`.
    #[command(args_conflicts_with_subcommands = true)]
    Usage {
        #[arg(long)]
        workspace: Option<String>,
        /// Only records finished at or after this RFC 3339 time.
        #[arg(long)]
        since: Option<DateTime<Utc>>,
        #[command(subcommand)]
        retention: Option<UsageCmd>,
    },
    /// A workspace's ledger and balance, or `ledger verify` for every workspace.
    #[command(args_conflicts_with_subcommands = true)]
    Ledger {
        #[arg(long)]
        workspace: Option<String>,
        #[command(subcommand)]
        verify: Option<LedgerCmd>,
    },
}

#[derive(Debug, Subcommand)]
pub enum UsageCmd {
    /// Write every record of each month before --before to PATH (usage-YYYY-MM.jsonl.zst and
    /// its manifest), read it back, then drop the month from the store with its
    /// carried-forward totals. The current month cannot be archived.
    Archive {
        /// The first month kept, YYYY-MM (at most the current month).
        #[arg(long)]
        before: String,
        /// The directory the archive files go to.
        #[arg(long)]
        to: PathBuf,
    },
    /// Load an archive file (usage-YYYY-MM.jsonl.zst, its manifest beside it) back into the
    /// store, for an audit.
    Restore { path: PathBuf },
}

#[derive(Debug, Subcommand)]
pub enum LedgerCmd {
    /// Check every balance row against the sum of its ledger and its usage records; exits 1
    /// on any disagreement.
    Verify,
}

#[derive(Debug, Subcommand)]
pub enum WorkspaceCmd {
    Create {
        #[arg(long)]
        name: String,
    },
    List,
}

#[derive(Debug, Subcommand)]
pub enum KeyCmd {
    /// Create a key; its secret is printed once and never again.
    Create(KeyCreate),
    List {
        #[arg(long)]
        workspace: String,
    },
    Revoke {
        id: String,
    },
    /// Change a key's name, spend limit or model allowlist (the change reaches every gateway
    /// within the change feed's delay). A limit's period, once set, cannot change.
    Update(KeyUpdateArgs),
    /// Replace a key by a new one with its settings (the new secret is printed once); the old
    /// key is revoked now, or keeps working for a grace period. A key is rotated once: to
    /// rotate again, rotate its replacement.
    Rotate {
        id: String,
        /// Seconds the old key keeps working (at most 2592000, 30 days); default: none.
        #[arg(long)]
        grace_seconds: Option<u64>,
    },
}

#[derive(Debug, Args)]
pub struct KeyCreate {
    #[arg(long)]
    workspace: String,
    #[arg(long)]
    name: Option<String>,
    /// RFC 3339 time after which the key is expired.
    #[arg(long)]
    expires_at: Option<DateTime<Utc>>,
    /// Spend cap in USD per window (exact decimal).
    #[arg(long, requires = "limit_reset")]
    spend_limit_usd: Option<String>,
    #[arg(long, value_enum, requires = "spend_limit_usd")]
    limit_reset: Option<LimitReset>,
    /// A model id pattern the key may call (`*`: any run of characters, e.g.
    /// `google/gemini-*`); repeat for more. None: every model.
    #[arg(long = "allow-model", value_name = "PATTERN")]
    allow_model: Vec<String>,
}

#[derive(Debug, Args)]
pub struct KeyUpdateArgs {
    id: String,
    #[arg(long, conflicts_with = "no_name")]
    name: Option<String>,
    /// Remove the key's name.
    #[arg(long)]
    no_name: bool,
    /// New spend cap in USD per window (exact decimal); a key without a limit needs
    /// `--limit-reset` too.
    #[arg(long)]
    spend_limit_usd: Option<String>,
    #[arg(long, value_enum)]
    limit_reset: Option<LimitReset>,
    /// The key's new allowlist: a model id pattern it may call; repeat for more. Replaces the
    /// whole list.
    #[arg(
        long = "allow-model",
        value_name = "PATTERN",
        conflicts_with = "allow_all_models"
    )]
    allow_model: Vec<String>,
    /// Clear the allowlist: the key may call every model.
    #[arg(long)]
    allow_all_models: bool,
}

#[derive(Debug, Subcommand)]
pub enum MkeyCmd {
    /// Create a management key for a workspace; its secret (`mk-tg-…`) is printed once.
    Create {
        #[arg(long)]
        workspace: String,
        #[arg(long)]
        name: Option<String>,
        /// RFC 3339 time after which the key no longer works.
        #[arg(long)]
        expires_at: Option<DateTime<Utc>>,
    },
    /// A workspace's management keys (never their secrets).
    List {
        #[arg(long)]
        workspace: String,
    },
    /// Revoke a management key: its next call is refused, on every gateway.
    Revoke { id: String },
}

#[derive(Debug, Subcommand)]
pub enum CreditCmd {
    /// Add prepaid credit (a ledger credit) to a workspace.
    Add {
        #[arg(long)]
        workspace: String,
        #[arg(long)]
        usd: String,
        #[arg(long)]
        note: Option<String>,
        /// Made at most once per key (1 to 255 printable ASCII characters) and workspace for
        /// 24 hours: the same key again prints the first answer and adds nothing.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Take credit not spent back from a workspace (a ledger refund); never more than the
    /// balance.
    Refund {
        #[arg(long)]
        workspace: String,
        /// How much, positive (exact decimal).
        #[arg(long)]
        usd: String,
        /// Why: kept as the entry's note and in the audit log.
        #[arg(long)]
        reason: String,
        /// As for `credit add`.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum CatalogCmd {
    /// Upsert models and routes from a catalog file.
    Import {
        file: PathBuf,
    },
    List,
    /// Ask each provider's model listing which models it still serves; report catalog drift.
    ///
    /// Every catalog route (active or not) of kind gemini-api, vertex, vertex-global, anthropic
    /// or vertex-anthropic is checked against the listing of the upstream it calls (the
    /// route's base URL, or its region's Vertex endpoint; publisher `google` or `anthropic`),
    /// with the conf's credentials (the API key variables, the Vertex service account):
    /// `listed`, `missing` (its calls would get the provider's 404), or `unchecked: <why>`
    /// (no credentials for that kind, the listing failed, OpenAI-compatible routes). Ids
    /// compare as the surface takes them: an Anthropic alias counts as its dated id; on
    /// Vertex a dated Claude model must be called `@date`. Then the models a checked
    /// upstream lists that no route of its kind calls ("not in catalog"), and notes on
    /// inactive models still listed. `--json` prints the whole report.
    ///
    /// Exit status 1 (and why, on stderr) when an active model's active route is missing;
    /// a missing inactive model or route is expected, an unchecked route is not a failure.
    Check {
        /// Seconds each listing request (and minting the Vertex token) may take.
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
        timeout: u64,
        /// Models asked per listing page; at most 50 pages are read a listing.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1000))]
        page_size: u64,
    },
}

/// Loads the conf; the default path may be absent (all defaults), an explicit one may not.
pub fn load_config(path: &Path) -> Result<Config, CliError> {
    if !path.exists() && path == Path::new("conf/tollgate.yaml") {
        return Ok(Config::parse("")?);
    }
    Ok(Config::load(path)?)
}

/// Runs an operator command (everything but `serve`): one command call, one rendering.
pub async fn run(cli: Cli, config: Config) -> Result<(), CliError> {
    let store = store::open(&config.store_url(|k| std::env::var(k).ok())).await?;
    let store = store.as_ref();
    let json = cli.json;
    let actor = commands::Actor::cli();
    if let Command::Migrate = cli.command {
        let done = commands::migrate(store).await?;
        return render::print(json, &done, &render::migrated(&done));
    }
    commands::migrate(store).await?;
    match cli.command {
        Command::Serve { .. } | Command::Migrate => Ok(()),
        Command::Workspace(WorkspaceCmd::Create { name }) => {
            let ws = commands::create_workspace(store, &actor, &name).await?;
            render::print(json, &ws, &render::workspace_created(&ws))
        }
        Command::Workspace(WorkspaceCmd::List) => {
            let list = commands::list_workspaces(store).await?;
            render::print(json, &list, &render::workspaces(&list))
        }
        Command::Key(KeyCmd::Create(args)) => {
            let created =
                commands::create_key(store, &actor, &config.tollgate.key_prefix, args.into())
                    .await?;
            render::print(json, &created, &render::key_created(&created))
        }
        Command::Key(KeyCmd::List { workspace }) => {
            let keys = commands::list_keys(store, &workspace).await?;
            render::print(json, &keys, &render::keys(&keys))
        }
        Command::Key(KeyCmd::Revoke { id }) => {
            let revoked = commands::revoke_key(store, &actor, &id, Utc::now()).await?;
            render::print(json, &revoked, &render::revoked(&revoked))
        }
        Command::Key(KeyCmd::Update(args)) => {
            let id = args.id.clone();
            let key = commands::update_key(store, &actor, &id, args.into()).await?;
            render::print(json, &key, &render::key_updated(&key))
        }
        Command::Mkey(MkeyCmd::Create {
            workspace,
            name,
            expires_at,
        }) => {
            let req = ManagementKeyRequest {
                workspace,
                name,
                expires_at,
            };
            let made = commands::create_management_key(store, &actor, req, Utc::now()).await?;
            render::print(json, &made, &render::management_key_created(&made))
        }
        Command::Mkey(MkeyCmd::List { workspace }) => {
            let keys = commands::management_keys(store, &workspace, Utc::now()).await?;
            render::print(json, &keys, &render::management_keys(&keys))
        }
        Command::Mkey(MkeyCmd::Revoke { id }) => {
            let key = commands::revoke_management_key(store, &actor, &id, Utc::now()).await?;
            render::print(json, &key, &render::management_key_revoked(&key))
        }
        Command::Key(KeyCmd::Rotate { id, grace_seconds }) => {
            let grace = grace_seconds.map(std::time::Duration::from_secs);
            let prefix = &config.tollgate.key_prefix;
            let r = commands::rotate_key(store, &actor, prefix, &id, grace, Utc::now()).await?;
            render::print(json, &r, &render::rotated(&r))
        }
        Command::Credit(CreditCmd::Add {
            workspace,
            usd,
            note,
            idempotency_key,
        }) => {
            let req = commands::CreditRequest {
                workspace: &workspace,
                usd: &usd,
                note: note.as_deref(),
                idempotency_key: idempotency_key.as_deref(),
            };
            let answered = commands::grant_credit(store, &actor, &req).await?;
            print_credited(json, answered, &workspace)
        }
        Command::Credit(CreditCmd::Refund {
            workspace,
            usd,
            reason,
            idempotency_key,
        }) => {
            let req = commands::CreditRequest {
                workspace: &workspace,
                usd: &usd,
                note: Some(&reason),
                idempotency_key: idempotency_key.as_deref(),
            };
            let answered = commands::refund_credit(store, &actor, &req).await?;
            print_credited(json, answered, &workspace)
        }
        Command::Catalog(CatalogCmd::Import { file }) => {
            let imported = commands::import_catalog(store, &actor, &file).await?;
            render::print(json, &imported, &render::imported(&imported))
        }
        Command::Catalog(CatalogCmd::List) => {
            let rows = commands::list_catalog(store).await?;
            render::print(json, &rows, &render::catalog(&rows))
        }
        Command::Catalog(CatalogCmd::Check { timeout, page_size }) => {
            let opts = commands::CheckOptions {
                timeout: std::time::Duration::from_secs(timeout),
                page_size: usize::try_from(page_size).unwrap_or(1000),
            };
            let env = |k: &str| std::env::var(k).ok();
            let (providers, upstream) = (&config.tollgate.providers, &config.tollgate.upstream);
            let report = commands::check_catalog(store, providers, upstream, env, opts).await?;
            render::print(json, &report, &render::drift(&report))?;
            drift_verdict(&report)
        }
        Command::Usage {
            retention: Some(UsageCmd::Archive { before, to }),
            ..
        } => {
            let archived = commands::archive_usage(store, &actor, &before, &to, Utc::now()).await?;
            render::print(json, &archived, &render::archived(&archived))
        }
        Command::Usage {
            retention: Some(UsageCmd::Restore { path }),
            ..
        } => {
            let restored = commands::restore_usage(store, &actor, &path).await?;
            render::print(json, &restored, &render::restored(&restored))
        }
        Command::Usage {
            workspace: Some(workspace),
            since,
            retention: None,
        } => {
            let records = commands::usage(store, &workspace, since).await?;
            render::print(json, &records, &render::usage(&records))
        }
        Command::Usage {
            workspace: None, ..
        } => Err(CliError::Usage(
            "usage needs --workspace ID, or: usage archive / usage restore".into(),
        )),
        Command::Ledger {
            verify: Some(LedgerCmd::Verify),
            ..
        } => {
            let verified = commands::verify_ledger(store).await?;
            render::print(json, &verified, &render::verified(&verified))?;
            if verified.is_clean() {
                Ok(())
            } else {
                Err(CliError::Usage("the ledger does not balance".into()))
            }
        }
        Command::Ledger {
            workspace: Some(workspace),
            verify: None,
        } => {
            let ledger = commands::ledger(store, &workspace).await?;
            render::print(json, &ledger, &render::ledger(&ledger))
        }
        Command::Ledger {
            workspace: None,
            verify: None,
        } => Err(CliError::Usage(
            "ledger needs --workspace ID, or: ledger verify".into(),
        )),
    }
}

/// A credit or refund, or the first answer to its idempotency key (said so on stderr).
fn print_credited(
    json: bool,
    answered: store::Done<commands::Credited>,
    workspace: &str,
) -> Result<(), CliError> {
    if matches!(answered, store::Done::Replayed(_)) {
        eprintln!("this idempotency key was used before: its first answer, nothing moved");
    }
    let credited = answered.into_value()?;
    render::print(json, &credited, &render::credited(&credited, workspace))
}

/// Fails (exit 1, the reasons on stderr) when an active route's model is not listed.
fn drift_verdict(report: &commands::DriftReport) -> Result<(), CliError> {
    if report.failures.is_empty() {
        return Ok(());
    }
    Err(CliError::Usage(format!(
        "catalog drift: {} active route(s) call a model their upstream does not list:\n  {}",
        report.failures.len(),
        report.failures.join("\n  ")
    )))
}

impl From<KeyCreate> for KeyRequest {
    fn from(a: KeyCreate) -> Self {
        KeyRequest {
            workspace: a.workspace,
            name: a.name,
            expires_at: a.expires_at,
            spend_limit_usd: a.spend_limit_usd,
            limit_reset: a.limit_reset,
            allowed_models: a.allow_model,
        }
    }
}

impl From<KeyUpdateArgs> for KeyPatch {
    fn from(a: KeyUpdateArgs) -> Self {
        let name = match (a.name, a.no_name) {
            (_, true) => Some(None),
            (name, false) => name.map(Some),
        };
        let allowed_models = match (a.allow_model, a.allow_all_models) {
            (_, true) => Some(Vec::new()),
            (list, false) if list.is_empty() => None,
            (list, false) => Some(list),
        };
        KeyPatch {
            name,
            spend_limit_usd: a.spend_limit_usd,
            limit_reset: a.limit_reset,
            allowed_models,
        }
    }
}
