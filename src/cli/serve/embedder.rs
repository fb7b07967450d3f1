//! The embedding engine: a thread owning the sentence embedder. It takes every request waiting when it is free
//! and embeds all their texts as one batched run (concurrent requests share the batches), then answers each.

use super::api::{ApiError, Metrics};
use crate::cli::error::CliError;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use tokio::sync::oneshot;
use webtensor::models::bert::{EmbedderOptions, SentenceEmbedder};
use webtensor::Device;

/// Texts embedded per run (the embedder's batch).
const BATCH: usize = 32;

/// A request's answer: a vector per text and the tokens they had in all.
pub(crate) type Embedded = Result<(Vec<Vec<f32>>, usize), ApiError>;

/// A request: its texts, and where the vectors and the token count go.
pub(crate) struct Job {
    pub texts: Vec<String>,
    pub reply: oneshot::Sender<Embedded>,
}

pub(crate) struct Handle {
    tx: mpsc::Sender<Job>,
    /// The size of the model's embeddings.
    pub dimensions: usize,
}

impl Handle {
    pub(crate) fn submit(&self, job: Job) -> Result<(), ApiError> {
        self.tx.send(job).map_err(|_| ApiError::server("the embedding engine has stopped".into()))
    }
}

/// Loads the embedder on its own thread and starts the engine there; returns once it is loaded (or failed to).
pub(crate) fn start(device: Device, dir: String, metrics: Arc<Metrics>) -> Result<Handle, CliError> {
    let (tx, rx) = mpsc::channel::<Job>();
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("webtensor-embedder".into())
        .spawn(move || match SentenceEmbedder::load(&device, &dir, EmbedderOptions::default()) {
            Ok(e) => {
                let _ = ready_tx.send(Ok(e.config.hidden));
                run(e, rx, &metrics);
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
            }
        })
        .map_err(|e| CliError::Msg(format!("cannot start the embedding thread: {e}")))?;
    let dimensions =
        ready_rx.recv().map_err(|_| CliError::Msg("the embedding thread ended while loading the model".into()))??;
    Ok(Handle { tx, dimensions })
}

fn run(mut e: SentenceEmbedder, rx: mpsc::Receiver<Job>, metrics: &Metrics) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        jobs.extend(rx.try_iter());
        // a request whose text does not tokenize fails alone; the others are embedded together
        let mut ok = vec![];
        for job in jobs {
            let counts: Result<Vec<usize>, _> = job.texts.iter().map(|t| e.tokenize(t).map(|ids| ids.len())).collect();
            match counts {
                Ok(c) => ok.push((job, c.iter().sum::<usize>())),
                Err(err) => {
                    let _ = job.reply.send(Err(ApiError::invalid(err.to_string())));
                }
            }
        }
        let texts: Vec<&str> = ok.iter().flat_map(|(j, _)| j.texts.iter().map(String::as_str)).collect();
        match e.embed_batched(&texts, BATCH) {
            Ok(vecs) => {
                metrics.embedded.fetch_add(texts.len(), Ordering::Relaxed);
                // the vectors in the order of the jobs' texts: each job takes as many as it gave
                let mut vecs = vecs.into_iter();
                for (job, tokens) in ok {
                    let mine: Vec<Vec<f32>> = vecs.by_ref().take(job.texts.len()).collect();
                    let _ = job.reply.send(Ok((mine, tokens)));
                }
            }
            Err(err) => {
                for (job, _) in ok {
                    let _ = job.reply.send(Err(ApiError::server(format!("embedding failed: {err}"))));
                }
            }
        }
    }
}
