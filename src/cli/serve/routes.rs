//! The endpoints: `POST /v1/chat/completions`, `POST /v1/completions` (streamed as server-sent events ending with
//! `data: [DONE]`, or whole), `POST /v1/embeddings`, `GET /v1/models`, `GET /health`, `GET /metrics`.

use super::api::{finish_reason, unix_now, ApiError, EmbedRequest, GenRequest, PromptIn};
use super::engine::{Job, Out, Prompt};
use super::{embedder, AppState};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;
use webtensor::models::reasoning::{Part, ReasoningSplitter};

type AppStateRef = State<Arc<AppState>>;

pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize))
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found_error", "no such endpoint".into()) })
        .with_state(state)
}

/// With `--api-key`: `Authorization: Bearer KEY` or 401.
async fn authorize(State(s): AppStateRef, req: Request, next: Next) -> Response {
    if let Some(key) = &s.api_key {
        let given = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        // the scheme's name is case-insensitive (RFC 7235)
        let token = given.and_then(|v| v.split_once(' ')).filter(|(s, _)| s.eq_ignore_ascii_case("bearer"));
        if token.map(|(_, t)| t.trim()) != Some(key.as_str()) {
            s.metrics.errors.fetch_add(1, Ordering::Relaxed);
            let msg = if given.is_some() { "invalid API key" } else { "missing API key (Authorization: Bearer KEY)" };
            return ApiError::new(StatusCode::UNAUTHORIZED, "authentication_error", msg.into()).into_response();
        }
    }
    next.run(req).await
}

/// The body as JSON of type `T`: 413 over `--max-body`, 400 for JSON that does not parse or fit.
async fn read_json<T: serde::de::DeserializeOwned>(s: &AppState, body: Body) -> Result<T, ApiError> {
    let bytes: Bytes = axum::body::to_bytes(body, s.max_body).await.map_err(|_| {
        let msg = format!("the request body is over the limit of {} bytes (--max-body)", s.max_body);
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "invalid_request_error", msg)
    })?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::invalid(format!("the body is not a valid request: {e}")))
}

/// 404 for a model name that is not the one served (none given: the one served).
fn check_model(given: Option<&str>, served: Option<&str>, what: &str) -> Result<String, ApiError> {
    let Some(served) = served else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found_error", format!("this server has no {what}")));
    };
    match given {
        Some(m) if !m.is_empty() && m != served => {
            let msg = format!("the model '{m}' does not exist here: this server's {what} is '{served}'");
            Err(ApiError::new(StatusCode::NOT_FOUND, "not_found_error", msg))
        }
        _ => Ok(served.to_string()),
    }
}

fn counted(s: &AppState, r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(|e| {
        s.metrics.errors.fetch_add(1, Ordering::Relaxed);
        e.into_response()
    })
}

async fn chat(State(s): AppStateRef, body: Body) -> Response {
    s.metrics.count(0);
    counted(&s, generate(&s, body, true).await)
}

async fn completions(State(s): AppStateRef, body: Body) -> Response {
    s.metrics.count(1);
    counted(&s, generate(&s, body, false).await)
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What a generation's answers share.
struct Answer {
    id: String,
    model: String,
    created: u64,
    chat: bool,
}

async fn generate(s: &AppState, body: Body, chat: bool) -> Result<Response, ApiError> {
    let mut req: GenRequest = read_json(s, body).await?;
    let model = check_model(req.model.as_deref(), s.model_id.as_deref(), "language model (--model)")?;
    let engine = s.engine.as_ref().expect("a model id means an engine");
    let prompt = if chat { Prompt::Chat(req.chat_messages()?) } else { one_prompt(req.prompt.take())? };
    // chat answers sample with the model's chat settings unless told otherwise; completions are greedy
    let defaults = if chat { engine.chat_defaults.clone() } else { Default::default() };
    let options = req.options(&defaults, engine.context)?;
    // rendered and tokenized here, on a blocking thread of the request's own, not on the engine's
    let prompter = engine.prompter.clone();
    let permit = engine.prompting.clone().acquire_owned().await.map_err(|_| ApiError::server("stopping".into()))?;
    let turn = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        prompt.ids(&prompter)
    })
    .await
    .map_err(|e| ApiError::server(format!("making the prompt failed: {e}")))?
    .map_err(|e| match e {
        webtensor::Error::OutOfMemory { .. } => ApiError::unavailable(e.to_string()),
        e => ApiError::invalid(e.to_string()),
    })?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let splitter = turn.reasoning;
    engine.submit(Job { prompt: turn.ids, options, tx })?;
    let prompt_tokens = match rx.recv().await {
        Some(Out::Started { prompt_tokens }) => prompt_tokens,
        Some(Out::Failed(e)) => return Err(e),
        _ => return Err(ApiError::server("the engine dropped the request".into())),
    };
    let kind = if chat { "chatcmpl" } else { "cmpl" };
    let a =
        Answer { id: format!("{kind}-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed)), model, created: unix_now(), chat };
    if req.stream.unwrap_or(false) {
        let usage = req.stream_options.as_ref().is_some_and(|o| o.include_usage);
        return Ok(stream(a, rx, prompt_tokens, usage, splitter));
    }
    let mut text = String::new();
    while let Some(out) = rx.recv().await {
        match out {
            Out::Text(t) => text.push_str(&t),
            Out::Done(g) => {
                let usage = usage(prompt_tokens, g.tokens.len());
                let reason = finish_reason(g.stop);
                let choice = if chat {
                    // as llama-server's default reasoning format: the reasoning apart, where the model has any
                    let (reasoning, answer) = splitter.split(&text);
                    let mut message = json!({"role": "assistant", "content": answer});
                    if !reasoning.is_empty() {
                        message["reasoning_content"] = json!(reasoning);
                    }
                    json!({"index": 0, "message": message, "finish_reason": reason, "logprobs": null})
                } else {
                    json!({"index": 0, "text": text, "finish_reason": reason, "logprobs": null})
                };
                let object = if chat { "chat.completion" } else { "text_completion" };
                let doc = json!({"id": a.id, "object": object, "created": a.created, "model": a.model,
                                 "choices": [choice], "usage": usage});
                return Ok(Json(doc).into_response());
            }
            Out::Failed(e) => return Err(e),
            Out::Started { .. } => {}
        }
    }
    Err(ApiError::server("the engine dropped the request".into()))
}

/// The one prompt of a completion request (a list of one is taken; several would need n > 1, refused).
fn one_prompt(p: Option<PromptIn>) -> Result<Prompt, ApiError> {
    let many = || ApiError::invalid("one prompt per request is supported (a list of several was given)".into());
    match p {
        None => Err(ApiError::invalid("'prompt' is required".into())),
        Some(PromptIn::Text(t)) => Ok(Prompt::Text(t)),
        Some(PromptIn::Tokens(ids)) => Ok(Prompt::Tokens(ids)),
        Some(PromptIn::Texts(mut v)) if v.len() == 1 => Ok(Prompt::Text(v.remove(0))),
        Some(PromptIn::TokenLists(mut v)) if v.len() == 1 => Ok(Prompt::Tokens(v.remove(0))),
        Some(_) => Err(many()),
    }
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

/// The answer as server-sent events: a chunk per piece of text (a chat's reasoning as `reasoning_content` deltas,
/// its answer as `content` ones), a last chunk with the finish reason, the usage chunk when asked, `[DONE]`.
/// Dropping the stream (the client left) closes the channel, which frees the slot.
fn stream(
    a: Answer,
    rx: UnboundedReceiver<Out>,
    prompt_tokens: usize,
    include_usage: bool,
    splitter: ReasoningSplitter,
) -> Response {
    let object = if a.chat { "chat.completion.chunk" } else { "text_completion" };
    let chunk = move |choice: Value, usage: Option<Value>| {
        let mut doc = json!({"id": a.id, "object": object, "created": a.created, "model": a.model, "choices": choice});
        if let Some(u) = usage {
            doc["usage"] = u;
        }
        Event::default().data(doc.to_string())
    };
    let chat = a.chat;
    let first = chat.then(|| {
        chunk(json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]), None)
    });
    let events = futures_util::stream::unfold(Some((rx, splitter)), move |state| {
        let chunk = chunk.clone();
        async move {
            let (mut rx, mut splitter) = state?;
            let text = |text: String| json!([{"index": 0, "text": text, "finish_reason": null, "logprobs": null}]);
            let delta = |part: Part| {
                let delta = match part {
                    Part::Reasoning(r) => json!({"reasoning_content": r}),
                    Part::Answer(a) => json!({"content": a}),
                };
                json!([{"index": 0, "delta": delta, "finish_reason": null}])
            };
            let end = |reason: &str| match chat {
                true => json!([{"index": 0, "delta": {}, "finish_reason": reason}]),
                false => json!([{"index": 0, "text": "", "finish_reason": reason, "logprobs": null}]),
            };
            loop {
                match rx.recv().await {
                    Some(Out::Text(t)) if t.is_empty() => continue,
                    Some(Out::Text(t)) if !chat => return Some((vec![chunk(text(t), None)], Some((rx, splitter)))),
                    Some(Out::Text(t)) => {
                        let v: Vec<Event> = splitter.push(&t).into_iter().map(|p| chunk(delta(p), None)).collect();
                        if v.is_empty() {
                            continue;
                        }
                        return Some((v, Some((rx, splitter))));
                    }
                    Some(Out::Done(g)) => {
                        let mut v: Vec<Event> = splitter.finish().into_iter().map(|p| chunk(delta(p), None)).collect();
                        v.push(chunk(end(finish_reason(g.stop)), None));
                        if include_usage {
                            v.push(chunk(json!([]), Some(usage(prompt_tokens, g.tokens.len()))));
                        }
                        v.push(Event::default().data("[DONE]"));
                        return Some((v, None));
                    }
                    Some(Out::Failed(e)) => {
                        return Some((vec![Event::default().data(e.body().to_string())], None));
                    }
                    Some(Out::Started { .. }) => continue,
                    None => return None,
                }
            }
        }
    });
    let events = futures_util::stream::iter(first).chain(events.flat_map(futures_util::stream::iter));
    Sse::new(events.map(Ok::<Event, std::convert::Infallible>)).keep_alive(KeepAlive::default()).into_response()
}

/// Texts one embeddings request may carry (OpenAI's limit).
const MAX_INPUTS: usize = 2048;

async fn embeddings(State(s): AppStateRef, body: Body) -> Response {
    s.metrics.count(2);
    counted(&s, embed(&s, body).await)
}

async fn embed(s: &AppState, body: Body) -> Result<Response, ApiError> {
    let req: EmbedRequest = read_json(s, body).await?;
    let model = check_model(req.model.as_deref(), s.embedding_id.as_deref(), "embedding model (--embedding-model)")?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(f) => return Err(ApiError::invalid(format!("encoding_format '{f}': 'float' or 'base64'"))),
    };
    let embedder = s.embedder.as_ref().expect("an embedding id means an embedder");
    if let Some(d) = req.dimensions.filter(|&d| d != embedder.dimensions as u64) {
        let msg = format!("dimensions is {d}: this model's embeddings have {} and no other size", embedder.dimensions);
        return Err(ApiError::invalid(msg));
    }
    let texts = req.input.into_vec();
    if texts.is_empty() {
        return Err(ApiError::invalid("'input' is empty".into()));
    }
    if texts.len() > MAX_INPUTS {
        let msg = format!("'input' has {} texts; at most {MAX_INPUTS} a request (as OpenAI allows)", texts.len());
        return Err(ApiError::invalid(msg));
    }
    let (reply, rx) = tokio::sync::oneshot::channel();
    embedder.submit(embedder::Job { texts, reply })?;
    let (vecs, tokens) =
        rx.await.map_err(|_| ApiError::server("the embedding engine dropped the request".into()))??;
    let data: Vec<Value> = vecs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let doc = json!({"object": "list", "data": data, "model": model,
                     "usage": {"prompt_tokens": tokens, "total_tokens": tokens}});
    Ok(Json(doc).into_response())
}

async fn models(State(s): AppStateRef) -> Response {
    s.metrics.count(3);
    let data: Vec<Value> = [&s.model_id, &s.embedding_id]
        .into_iter()
        .flatten()
        .map(|id| json!({"id": id, "object": "model", "created": s.started, "owned_by": "webtensor"}))
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

async fn metrics(State(s): AppStateRef) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render()).into_response()
}
