//! The `tollgate` command line: argument definitions and the operator commands. Commands change
//! state only through the `Store` (the admin API will call the same functions).

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use crate::auth::{mint_secret, new_id};
use crate::catalog::import::{self, ImportError};
use crate::config::{Config, ConfigError};
use crate::money::{MoneyError, Usd};
use crate::store::{self, LimitReset, NewKey, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error(transparent)]
    Money(#[from] MoneyError),
    #[error(transparent)]
    Credentials(#[from] crate::upstream::credentials::CredentialError),
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
    #[command(subcommand)]
    Credit(CreditCmd),
    #[command(subcommand)]
    Catalog(CatalogCmd),
    /// A workspace's usage records (oldest first).
    Usage {
        #[arg(long)]
        workspace: String,
        /// Only records finished at or after this RFC 3339 time.
        #[arg(long)]
        since: Option<DateTime<Utc>>,
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
    },
}

#[derive(Debug, Subcommand)]
pub enum CatalogCmd {
    /// Upsert models and routes from a catalog file.
    Import {
        file: PathBuf,
    },
    List,
}

/// Loads the conf; the default path may be absent (all defaults), an explicit one may not.
pub fn load_config(path: &Path) -> Result<Config, CliError> {
    if !path.exists() && path == Path::new("conf/tollgate.yaml") {
        return Ok(Config::parse("")?);
    }
    Ok(Config::load(path)?)
}

/// Migrations, then the default catalog if the catalog is empty. Idempotent.
pub async fn prepare_store(store: &dyn Store, catalog_file: &str) -> Result<(), CliError> {
    let applied = store.migrate().await?;
    if applied > 0 {
        tracing::info!(applied, "schema migrations applied");
    }
    if store.catalog_is_empty().await? && Path::new(catalog_file).exists() {
        let rows = import::read_file(Path::new(catalog_file))?;
        store.import_catalog(&rows).await?;
        tracing::info!(
            models = rows.models.len(),
            file = catalog_file,
            "default catalog imported"
        );
    }
    Ok(())
}

/// Runs an operator command (everything but `serve`).
pub async fn run(cli: Cli, config: Config) -> Result<(), CliError> {
    let store = store::open(&config.store_url(|k| std::env::var(k).ok())).await?;
    let store = store.as_ref();
    if let Command::Migrate = cli.command {
        let applied = store.migrate().await?;
        return print(
            cli.json,
            &serde_json::json!({ "applied": applied }),
            &format!("{applied} migration(s) applied"),
        );
    }
    store.migrate().await?;
    let json = cli.json;
    match cli.command {
        Command::Serve { .. } | Command::Migrate => Ok(()),
        Command::Workspace(WorkspaceCmd::Create { name }) => {
            let ws = store.create_workspace(&new_id("ws"), &name).await?;
            print(
                json,
                &ws,
                &format!("workspace {} created ({})", ws.id, ws.name),
            )
        }
        Command::Workspace(WorkspaceCmd::List) => {
            let list = store.list_workspaces().await?;
            let text = list
                .iter()
                .map(|w| format!("{}  {}  {}", w.id, w.created_at.to_rfc3339(), w.name))
                .collect::<Vec<_>>()
                .join("\n");
            print(json, &list, &text)
        }
        Command::Key(KeyCmd::Create(args)) => create_key(store, &config, args, json).await,
        Command::Key(KeyCmd::List { workspace }) => {
            let keys = store.list_keys(&workspace).await?;
            let text = keys.iter().map(describe_key).collect::<Vec<_>>().join("\n");
            print(json, &keys, &text)
        }
        Command::Key(KeyCmd::Revoke { id }) => {
            let changed = store.revoke_key(&id, Utc::now()).await?;
            let text = if changed {
                format!("key {id} revoked")
            } else {
                format!("key {id} was already revoked")
            };
            print(
                json,
                &serde_json::json!({ "id": id, "revoked": true, "changed": changed }),
                &text,
            )
        }
        Command::Credit(CreditCmd::Add {
            workspace,
            usd,
            note,
        }) => {
            let amount: Usd = usd.parse()?;
            if !amount.is_positive() {
                return Err(CliError::Usage("--usd must be positive".into()));
            }
            let entry = store
                .add_credit(&new_id("le"), &workspace, amount, note.as_deref())
                .await?;
            let balance = store.balance(&workspace).await?;
            #[derive(Serialize)]
            struct Out<'a> {
                entry: &'a store::LedgerEntry,
                balance: Usd,
            }
            print(
                json,
                &Out {
                    entry: &entry,
                    balance,
                },
                &format!("credited {amount} USD to {workspace}; balance {balance} USD"),
            )
        }
        Command::Catalog(CatalogCmd::Import { file }) => {
            let rows = import::read_file(&file)?;
            store.import_catalog(&rows).await?;
            let text = format!(
                "imported {} model(s), {} route(s)",
                rows.models.len(),
                rows.routes.len()
            );
            print(
                json,
                &serde_json::json!({ "models": rows.models.len(), "routes": rows.routes.len() }),
                &text,
            )
        }
        Command::Usage { workspace, since } => {
            let records = store.usage(&workspace, since).await?;
            let text = records
                .iter()
                .map(|r| {
                    format!(
                        "{}  {}  {:<32} {:<16} in {} cached {} written {} out {} (reasoning {})  {} USD  {:?}",
                        r.finished_at.to_rfc3339(), r.id, r.model_id, r.route, r.input_tokens, r.cache_read_tokens,
                        r.cache_write_tokens, r.output_tokens, r.reasoning_tokens, r.cost, r.outcome
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            print(json, &records, &text)
        }
        Command::Ledger {
            verify: Some(LedgerCmd::Verify),
            ..
        } => {
            let checks = store.ledger_verify().await?;
            let bad: Vec<_> = checks.iter().filter(|c| !c.is_consistent()).collect();
            let text = format!(
                "{} workspace(s) checked, {} inconsistent",
                checks.len(),
                bad.len()
            );
            print(
                json,
                &serde_json::json!({ "checked": checks.len(), "inconsistent": bad }),
                &text,
            )?;
            if bad.is_empty() {
                Ok(())
            } else {
                Err(CliError::Usage("the ledger does not balance".into()))
            }
        }
        Command::Ledger {
            workspace: Some(workspace),
            verify: None,
        } => {
            let entries = store.ledger(&workspace).await?;
            let balance = store.balance(&workspace).await?;
            let mut text: Vec<String> = entries
                .iter()
                .map(|e| {
                    format!(
                        "{}  {:<6} {:>24} USD  {}",
                        e.created_at.to_rfc3339(),
                        format!("{:?}", e.kind).to_lowercase(),
                        e.amount,
                        e.note.as_deref().or(e.usage_id.as_deref()).unwrap_or("")
                    )
                })
                .collect();
            text.push(format!("balance {balance} USD"));
            print(
                json,
                &serde_json::json!({ "entries": entries, "balance": balance }),
                &text.join("\n"),
            )
        }
        Command::Ledger {
            workspace: None,
            verify: None,
        } => Err(CliError::Usage(
            "ledger needs --workspace ID, or: ledger verify".into(),
        )),
        Command::Catalog(CatalogCmd::List) => {
            let rows = store.load_catalog().await?;
            let text = rows
                .models
                .iter()
                .map(|m| {
                    let routes: Vec<String> = rows
                        .routes
                        .iter()
                        .filter(|r| r.model_id == m.id)
                        .map(|r| format!("{}{}", r.kind, if r.active { "" } else { "(off)" }))
                        .collect();
                    format!(
                        "{:<36} {:<9} in {:>8} out {:>8}  {}{}",
                        m.id,
                        m.kind,
                        m.input_price,
                        m.output_price,
                        routes.join(","),
                        if m.active { "" } else { "  [inactive]" }
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            print(json, &rows, &text)
        }
    }
}

async fn create_key(
    store: &dyn Store,
    config: &Config,
    args: KeyCreate,
    json: bool,
) -> Result<(), CliError> {
    let spend_limit = args
        .spend_limit_usd
        .as_deref()
        .map(str::parse::<Usd>)
        .transpose()?;
    if spend_limit.is_some_and(|l| !l.is_positive()) {
        return Err(CliError::Usage("--spend-limit-usd must be positive".into()));
    }
    let minted = mint_secret(&config.tollgate.key_prefix);
    let key = store
        .create_key(NewKey {
            id: new_id("key"),
            workspace_id: args.workspace,
            name: args.name,
            secret_hash: minted.hash_hex,
            hint: minted.hint,
            expires_at: args.expires_at,
            spend_limit,
            limit_reset: args.limit_reset,
        })
        .await?;
    #[derive(Serialize)]
    struct Out<'a> {
        #[serde(flatten)]
        key: &'a store::ApiKey,
        secret: &'a str,
    }
    let text = format!(
        "{}\nsecret (shown once, store it now): {}",
        describe_key(&key),
        minted.secret
    );
    print(
        json,
        &Out {
            key: &key,
            secret: &minted.secret,
        },
        &text,
    )
}

fn describe_key(k: &store::ApiKey) -> String {
    let state = match (k.revoked_at, k.expires_at) {
        (Some(_), _) => "revoked".to_owned(),
        (None, Some(at)) if at <= Utc::now() => "expired".to_owned(),
        _ => "active".to_owned(),
    };
    let limit = match (k.spend_limit, k.limit_reset) {
        (Some(l), Some(r)) => format!("  limit {l} USD/{}", r.as_str()),
        _ => String::new(),
    };
    let expires = k
        .expires_at
        .map(|e| format!("  expires {}", e.to_rfc3339()))
        .unwrap_or_default();
    format!(
        "{}  {}  {}  {}{}{}",
        k.id,
        k.hint,
        state,
        k.name.as_deref().unwrap_or("-"),
        expires,
        limit
    )
}

fn print<T: Serialize>(json: bool, value: &T, text: &str) -> Result<(), CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, value)
            .map_err(|e| CliError::Usage(e.to_string()))?;
        writeln!(out)?;
    } else if !text.is_empty() {
        writeln!(out, "{text}")?;
    }
    Ok(())
}
