//! `detafs serve` and `detafs apikey`: the HTTPS gateway and its keys.

use anyhow::Context;
use detafs::gateway::{self, GatewayOptions, tls, tokens};
use detafs::repo::Repo;
use detafs::repo::apikeys;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// `detafs serve`'s options.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub listen: SocketAddr,
    /// Certificate chain (PEM); with --tls-key. Default: a self-signed
    /// pair kept beside the store's local index.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Accept OAuth2 bearer JWTs signed by a key of this JWKS (a file,
    /// or an https URL); with --issuer and --audience.
    #[arg(long, requires_all = ["issuer", "audience"])]
    pub jwks: Option<String>,
    /// The tokens' required `iss`.
    #[arg(long, requires = "jwks")]
    pub issuer: Option<String>,
    /// The tokens' required `aud`.
    #[arg(long, requires = "jwks")]
    pub audience: Option<String>,
    /// How often the consistency audit (`verify` of the whole store)
    /// runs; its result is in /health and /metrics.
    #[arg(long, default_value = "6h")]
    pub audit_interval: humantime::Duration,
    /// A policy file (the format of `policy set`) this gateway applies
    /// on top of the store's: a request must be allowed by both (say, a
    /// public gateway that only reads).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Also answer the S3 protocol here (versions read-only, writes under
    /// staging/; TLS with the same certificate; S3 keys: `apikey create --s3`).
    #[arg(long)]
    pub s3_listen: Option<SocketAddr>,
    /// The endpoint's domain for virtual-host addressing
    /// (`BUCKET.DOMAIN[:PORT]`); path-style addressing works without it.
    #[arg(long, requires = "s3_listen")]
    pub s3_domain: Option<String>,
}

pub fn serve(repo: Repo, args: ServeArgs) -> anyhow::Result<()> {
    let ServeArgs {
        listen,
        tls_cert: cert,
        tls_key: key,
        jwks,
        issuer,
        audience,
        audit_interval,
        policy,
        s3_listen,
        s3_domain,
    } = args;
    let tokens = match (jwks, issuer, audience) {
        (Some(j), Some(i), Some(a)) => Some((j, i, a)),
        _ => None,
    };
    let audit_interval: std::time::Duration = audit_interval.into();
    let policy = match policy {
        Some(file) => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            Some(
                detafs::access::Policy::parse_narrowing(&text)
                    .with_context(|| format!("--policy {}", file.display()))?,
            )
        }
        None => None,
    };
    let tokens = match tokens {
        Some((jwks, issuer, audience)) => Some(tokens::Tokens::new(
            tokens::Jwks::parse(&jwks).map_err(anyhow::Error::msg)?,
            issuer,
            audience,
        )),
        None => None,
    };
    let tls = match (cert, key) {
        (Some(c), Some(k)) => tls::load(&c, &k)?,
        (None, None) => {
            let (tls, made) = tls::self_signed(repo.state_dir())?;
            let dir = repo.state_dir().display();
            eprintln!(
                "{} self-signed certificate {dir}/gateway-cert.pem",
                if made { "made a" } else { "using the" },
            );
            tls
        }
        _ => anyhow::bail!("give both --tls-cert and --tls-key, or neither (a self-signed pair)"),
    };
    eprintln!("certificate SHA-256 fingerprint: {}", tls.fingerprint);
    let audit = repo
        .state_dir()
        .join(format!("gateway-{}.jsonl", listen.port()));
    let opts = GatewayOptions {
        listen,
        tls,
        audit,
        tokens,
        audit_interval,
        policy,
        s3_listen,
        s3_domain,
    };
    gateway::serve(Arc::new(repo), opts, |addr, s3| {
        eprintln!("serving https://{addr}/");
        if let Some(s3) = s3 {
            eprintln!("S3 endpoint https://{s3}/");
        }
    })
    .context("the gateway stopped")?;
    Ok(())
}

/// `apikey create`: prints the key once (with `--s3`, as the two lines of
/// an AWS credentials file).
pub fn create(repo: &Repo, name: &str, scopes: &[String], s3: bool) -> anyhow::Result<()> {
    let scopes = apikeys::parse_scopes(scopes)?;
    let author = detafs::access::caller::current_user();
    let (k, secret) = repo.create_api_key(name, scopes, &author, s3)?;
    eprintln!(
        "key {} ({}): shown once, keep it secret",
        k.name,
        k.scopes.join(", ")
    );
    match (k.s3_access_key(), &k.s3_secret) {
        (Some(id), Some(s3_secret)) => {
            println!("aws_access_key_id = {id}");
            println!("aws_secret_access_key = {s3_secret}");
        }
        _ => println!("{secret}"),
    }
    Ok(())
}

pub fn list(repo: &Repo, json: bool) -> anyhow::Result<()> {
    let keys = repo.api_keys()?;
    if json {
        let rows: Vec<_> = keys
            .iter()
            .map(|k| {
                serde_json::json!({
                    "name": k.name, "created": k.created, "author": k.author,
                    "scopes": k.scopes, "revoked": k.revoked,
                    "s3_access_key": k.s3_access_key(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    for k in keys {
        println!(
            "{:<20} {}  {}  {}{}",
            k.name,
            k.created,
            k.author,
            k.scopes.join(","),
            if k.revoked { "  (revoked)" } else { "" }
        );
    }
    Ok(())
}
