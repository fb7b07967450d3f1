//! `webtensor serve`: an OpenAI-compatible HTTP server, as llama.cpp's `llama-server`. Chat and text completions
//! from a GGUF language model (any architecture webtensor runs), decoded several at once in one step (continuous
//! batching over `--parallel` slots: [`webtensor::models::decoder::Batch`]), and embeddings from a sentence-transformers
//! directory, concurrent requests embedded together.
//!
//! Threads: tokio's runtime runs the HTTP side (axum on hyper); the model runs on an engine thread of its own
//! (`engine.rs`), which admits queued requests between steps and streams each one's tokens back over a channel;
//! the embedder likewise (`embedder.rs`). A client that goes away drops its channel, and the engine frees its
//! slot at the next step.

mod api;
mod embedder;
mod engine;
mod routes;

use crate::cli::device::{choose_device, describe, short_name};
use crate::cli::error::CliError;
use std::sync::Arc;

/// `webtensor serve` arguments.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// The language model: a GGUF file of a supported architecture.
    #[arg(long, value_name = "FILE.gguf|NAME", value_parser = crate::cli::models::gguf_path)]
    model: Option<String>,
    /// A sentence-transformers directory (MiniLM, BGE, E5, ...) or a BERT GGUF file for /v1/embeddings.
    #[arg(long, value_name = "DIR|FILE.gguf|NAME", value_parser = crate::cli::models::any_path)]
    embedding_model: Option<String>,
    /// The language model's name in the API (requests' `model`, /v1/models); default: its file name without
    /// `.gguf`.
    #[arg(long, value_name = "NAME")]
    alias: Option<String>,
    /// The embedding model's name in the API; default: its directory's name (its parent's where that is `model`).
    #[arg(long, value_name = "NAME")]
    embedding_alias: Option<String>,
    /// Address to listen on (127.0.0.1: this machine only; 0.0.0.0 for every interface).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free one; the line "listening on http://HOST:PORT" says which).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Sequences decoded at once (slots, each with a KV cache of --ctx positions).
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// KV-cache positions per sequence (prompt + output); 0: the model's context, at most 4096.
    #[arg(long, default_value_t = 0)]
    ctx: usize,
    /// Requests that may wait for a slot; more get 503 with Retry-After.
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health.
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
    /// Largest request body, in bytes (more: 413).
    #[arg(long, default_value_t = 4 << 20)]
    max_body: usize,
    /// Device to run on. Without the flag, Device::best() decides and honours WEBTENSOR_BACKEND.
    #[arg(long, value_parser = crate::cli::device::backend_parser())]
    backend: Option<webtensor::BackendKind>,
}

/// What the handlers share.
pub(crate) struct AppState {
    /// The language model's id (its file name without `.gguf`), if one is served.
    pub model_id: Option<String>,
    /// The embedding model's id (its directory's name), if one is served.
    pub embedding_id: Option<String>,
    pub engine: Option<engine::Handle>,
    pub embedder: Option<embedder::Handle>,
    pub api_key: Option<String>,
    pub max_body: usize,
    pub metrics: Arc<api::Metrics>,
    /// Unix seconds at start (`created` of /v1/models).
    pub started: u64,
}

pub fn run(args: &ServeArgs) -> Result<(), CliError> {
    if args.model.is_none() && args.embedding_model.is_none() {
        return Err(CliError::Msg("nothing to serve: pass --model FILE.gguf and/or --embedding-model DIR".into()));
    }
    if args.parallel == 0 || args.parallel > 64 {
        return Err(CliError::Msg(format!("--parallel is {}: it must be from 1 to 64", args.parallel)));
    }
    let chosen = choose_device(args.backend)?;
    let metrics = Arc::new(api::Metrics::default());
    let stem = |p: &str, ext: &str| {
        let path = std::path::Path::new(p.trim_end_matches('/'));
        let name = |p: &std::path::Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
        // a directory called `model` (as some packages ship one) is named by its parent
        let named = if name(path).as_deref() == Some("model") { path.parent().unwrap_or(path) } else { path };
        let name = name(named).unwrap_or_else(|| p.to_string());
        name.strip_suffix(ext).map(str::to_string).unwrap_or(name)
    };
    let engine = match &args.model {
        Some(path) => {
            eprintln!("loading {path} on {} with {} slots ...", describe(&chosen.device), args.parallel);
            let cfg = engine::Config { path: path.clone(), slots: args.parallel, ctx: args.ctx, queue: args.queue };
            Some(engine::start(chosen.device.clone(), cfg, metrics.clone())?)
        }
        None => None,
    };
    let embedder = match &args.embedding_model {
        Some(dir) => {
            // the device said once: on the model's line where there is a model
            let on = if args.model.is_some() { short_name(&chosen.device) } else { describe(&chosen.device) };
            eprintln!("loading {dir} on {on} ...");
            Some(embedder::start(chosen.device.clone(), dir.clone(), metrics.clone())?)
        }
        None => None,
    };
    let state = Arc::new(AppState {
        model_id: args.model.as_deref().map(|p| args.alias.clone().unwrap_or_else(|| stem(p, ".gguf"))),
        embedding_id: args
            .embedding_model
            .as_deref()
            .map(|p| args.embedding_alias.clone().unwrap_or_else(|| stem(p, ".gguf"))),
        engine,
        embedder,
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        max_body: args.max_body,
        metrics,
        started: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::Msg(format!("cannot start the async runtime: {e}")))?;
    let served = rt.block_on(serve(state, &args.host, args.port));
    // a render that has not ended (each is bounded in time, but a blocking thread cannot be stopped) does not
    // keep the process from exiting
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    served
}

async fn serve(state: Arc<AppState>, host: &str, port: u16) -> Result<(), CliError> {
    let listener = tokio::net::TcpListener::bind((host, port))
        .await
        .map_err(|e| CliError::Msg(format!("cannot listen on {host}:{port}: {e}")))?;
    let addr = listener.local_addr().map_err(|e| CliError::Msg(format!("{e}")))?;
    eprintln!("listening on http://{addr} (OpenAI API under /v1; Ctrl-C stops)");
    let app = routes::router(state.clone());
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| CliError::Msg(format!("server: {e}")))?;
    eprintln!("stopped: every request in flight was answered");
    Ok(())
}

/// Ctrl-C or SIGTERM: stop accepting; in-flight requests run to their end.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!("stopping: no new requests; finishing those in flight ...");
}
