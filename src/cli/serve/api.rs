//! The OpenAI API's shapes: requests as the `openai` clients send them, errors as OpenAI and llama-server
//! return them (`{"error": {"message", "type", "code"}}` with the HTTP status), and the counters of /metrics.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use webtensor::models::{GenerateOptions, Message, SamplingOptions};

/// An error answer: its status, OpenAI's error type and the message.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: String) -> ApiError {
        ApiError { status, kind, message }
    }
    /// 400: a request that cannot be served as it is.
    pub fn invalid(message: String) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }
    /// 500: the server failed.
    pub fn server(message: String) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }
    /// 503: the queue is full (with Retry-After).
    pub fn unavailable(message: String) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable_error", message)
    }
    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": null, "code": self.status.as_u16()}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

/// The server's counters (Prometheus text at /metrics).
#[derive(Default)]
pub(crate) struct Metrics {
    pub requests: [AtomicUsize; 4],
    pub errors: AtomicUsize,
    pub prompt_tokens: AtomicUsize,
    pub tokens_predicted: AtomicUsize,
    pub embedded: AtomicUsize,
    pub disconnected: AtomicUsize,
    pub slots_busy: AtomicUsize,
    pub slots_total: AtomicUsize,
    pub queued: AtomicUsize,
}

/// The endpoints counted in `requests`.
pub(crate) const ENDPOINTS: [&str; 4] = ["chat_completions", "completions", "embeddings", "models"];

impl Metrics {
    /// Prometheus' text format (version 0.0.4).
    pub fn render(&self) -> String {
        let g = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        let mut s = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, lines: Vec<(String, usize)>| {
            s += &format!("# HELP webtensor_{name} {help}\n# TYPE webtensor_{name} {kind}\n");
            for (labels, v) in lines {
                s += &format!("webtensor_{name}{labels} {v}\n");
            }
        };
        let by_endpoint = ENDPOINTS.iter().zip(&self.requests).map(|(e, a)| (format!("{{endpoint=\"{e}\"}}"), g(a)));
        metric("requests_total", "counter", "Requests received, by endpoint.", by_endpoint.collect());
        metric("errors_total", "counter", "Requests answered with an error.", vec![(String::new(), g(&self.errors))]);
        let one = |a: &AtomicUsize| vec![(String::new(), g(a))];
        metric("prompt_tokens_total", "counter", "Prompt tokens evaluated.", one(&self.prompt_tokens));
        metric("tokens_predicted_total", "counter", "Tokens generated.", one(&self.tokens_predicted));
        metric("embeddings_total", "counter", "Texts embedded.", one(&self.embedded));
        metric("disconnects_total", "counter", "Requests cancelled by their client leaving.", one(&self.disconnected));
        metric("slots_busy", "gauge", "Sequences being generated.", one(&self.slots_busy));
        metric("slots_total", "gauge", "Sequences that can be generated at once.", one(&self.slots_total));
        metric("requests_queued", "gauge", "Requests waiting for a slot.", one(&self.queued));
        s
    }

    pub fn count(&self, endpoint: usize) {
        self.requests[endpoint].fetch_add(1, Ordering::Relaxed);
    }
}

/// A string or a list of strings (`stop`, `input`, `prompt`).
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// A prompt: text, texts, token ids or lists of them (only one prompt per request here).
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum PromptIn {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

/// A message's content: text, or parts of which the text ones are used.
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
pub(crate) struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct MessageIn {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
}

#[derive(Deserialize, Default)]
pub(crate) struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// The fields of /v1/chat/completions and /v1/completions that shape the generation (others are ignored, as
/// llama-server does).
#[derive(Deserialize)]
pub(crate) struct GenRequest {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub messages: Option<Vec<MessageIn>>,
    #[serde(default)]
    pub prompt: Option<PromptIn>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    pub max_tokens: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<usize>,
    pub min_p: Option<f32>,
    pub seed: Option<u64>,
    pub stop: Option<OneOrMany>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repeat_penalty: Option<f32>,
    pub n: Option<u64>,
    /// llama-server's extension: go on past end-of-generation tokens (benchmarks).
    #[serde(default)]
    pub ignore_eos: bool,
    /// Fields that change what the answer is and that webtensor does not implement: refused when they ask for
    /// something (an answer that silently lacks what was asked for is worse than an error).
    #[serde(default)]
    pub logprobs: Option<Value>,
    #[serde(default)]
    pub top_logprobs: Option<u64>,
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub best_of: Option<u64>,
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(default)]
    pub logit_bias: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub response_format: Option<Value>,
    #[serde(default)]
    pub functions: Option<Vec<Value>>,
    #[serde(default)]
    pub function_call: Option<Value>,
    #[serde(default)]
    pub modalities: Option<Vec<String>>,
    #[serde(default)]
    pub audio: Option<Value>,
}

impl GenRequest {
    /// The generation options: each field given in place of `defaults`' (the model's chat settings for chat,
    /// greedy for completions, as llama-server's defaults differ per endpoint only in the template), the token
    /// limit `max_tokens` or else the context.
    pub fn options(&self, defaults: &SamplingOptions, context: usize) -> Result<GenerateOptions, ApiError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::invalid(format!("n is {}: only n = 1 is supported", self.n.unwrap_or(0))));
        }
        self.refuse_unsupported()?;
        let seed = self.seed.unwrap_or_else(|| {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            t.as_nanos() as u64
        });
        let d = defaults;
        let sampling = SamplingOptions {
            temperature: self.temperature.unwrap_or(d.temperature),
            top_p: self.top_p.unwrap_or(d.top_p),
            top_k: self.top_k.unwrap_or(d.top_k),
            min_p: self.min_p.unwrap_or(d.min_p),
            presence_penalty: self.presence_penalty.unwrap_or(d.presence_penalty),
            frequency_penalty: self.frequency_penalty.unwrap_or(d.frequency_penalty),
            repetition_penalty: self.repeat_penalty.unwrap_or(d.repetition_penalty),
            seed,
            ..d.clone()
        };
        let max = self.max_completion_tokens.or(self.max_tokens).map_or(context as u64, |m| m.min(context as u64));
        let stop = match &self.stop {
            None => vec![],
            Some(OneOrMany::One(x)) => vec![x.clone()],
            Some(OneOrMany::Many(v)) => v.clone(),
        };
        // an empty stop string would stop before the first token: OpenAI ignores it
        let stop = stop.into_iter().filter(|x| !x.is_empty()).collect();
        let options = GenerateOptions { max_tokens: max as usize, sampling, stop, ignore_eos: self.ignore_eos };
        options.validate().map_err(|e| ApiError::invalid(e.to_string()))?;
        Ok(options)
    }

    /// A 400 naming the first field that asks for what webtensor does not do (log-probabilities, echo, best_of,
    /// suffix, logit_bias, tools and functions, a response format other than text, output other than text);
    /// such fields left at their "off" value (`false`, `null`, empty, `"none"`, `{"type": "text"}`,
    /// `top_logprobs: 0`, `best_of: 1`) are accepted, as clients send them so.
    fn refuse_unsupported(&self) -> Result<(), ApiError> {
        // a completion's `logprobs: 0` asks for the chosen tokens' log-probabilities
        let asked = |v: &Value| !matches!(v, Value::Null | Value::Bool(false));
        let refused = if self.logprobs.as_ref().is_some_and(asked) {
            Some("logprobs")
        } else if self.top_logprobs.is_some_and(|n| n > 0) {
            Some("top_logprobs")
        } else if self.echo == Some(true) {
            Some("echo")
        } else if self.best_of.is_some_and(|n| n > 1) {
            Some("best_of")
        } else if self.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
            Some("suffix")
        } else if self.logit_bias.as_ref().is_some_and(|m| !m.is_empty()) {
            Some("logit_bias")
        } else if self.tools.as_ref().is_some_and(|t| !t.is_empty()) {
            Some("tools")
        } else if self.tool_choice.as_ref().is_some_and(|c| !matches!(c, Value::Null) && c.as_str() != Some("none")) {
            Some("tool_choice")
        } else if self.response_format.as_ref().is_some_and(|f| !f.is_null() && f["type"].as_str() != Some("text")) {
            Some("response_format")
        } else if self.functions.as_ref().is_some_and(|f| !f.is_empty()) {
            Some("functions")
        } else if self.function_call.as_ref().is_some_and(|c| !c.is_null() && c.as_str() != Some("none")) {
            Some("function_call")
        } else if self.modalities.as_ref().is_some_and(|m| m.iter().any(|x| x != "text")) {
            Some("modalities")
        } else if self.audio.as_ref().is_some_and(|a| !a.is_null()) {
            Some("audio")
        } else {
            None
        };
        match refused {
            Some(field) => Err(ApiError::invalid(format!("'{field}' is not supported by this server"))),
            None => Ok(()),
        }
    }

    /// The conversation of a chat request.
    pub fn chat_messages(&self) -> Result<Vec<Message>, ApiError> {
        let msgs = self.messages.as_ref().ok_or_else(|| ApiError::invalid("'messages' is required".into()))?;
        if msgs.is_empty() {
            return Err(ApiError::invalid("'messages' is empty".into()));
        }
        msgs.iter()
            .map(|m| {
                let text = match &m.content {
                    None => String::new(),
                    Some(Content::Text(t)) => t.clone(),
                    Some(Content::Parts(p)) => {
                        if let Some(other) = p.iter().find(|x| x.kind != "text") {
                            return Err(ApiError::invalid(format!(
                                "a message part of type '{}' is not supported: the model takes text only",
                                other.kind
                            )));
                        }
                        p.iter().filter_map(|x| x.text.clone()).collect::<Vec<_>>().join("")
                    }
                };
                Ok(Message::new(&m.role, &text))
            })
            .collect()
    }
}

/// The body of /v1/embeddings.
#[derive(Deserialize)]
pub(crate) struct EmbedRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub input: OneOrMany,
    #[serde(default)]
    pub encoding_format: Option<String>,
    /// The size of the embeddings asked for: the model's own, or refused (this model has no shorter form).
    #[serde(default)]
    pub dimensions: Option<u64>,
}

/// OpenAI's `finish_reason` for a stop reason.
pub(crate) fn finish_reason(stop: webtensor::models::StopReason) -> &'static str {
    use webtensor::models::StopReason::*;
    match stop {
        EndOfGeneration | StopString | Cancelled => "stop",
        MaxTokens | ContextFull => "length",
    }
}

/// Unix time in seconds.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
