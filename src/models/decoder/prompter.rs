//! A model's prompts: its tokenizer and chat template, apart from the model so that other threads can render and
//! tokenize while the model decodes (a server makes each request's prompt on the request's own thread).

use crate::error::{Error, Result};
use crate::models::chat::{ChatTemplate, Message};
use crate::models::reasoning::{ReasoningFormat, ReasoningSplitter};
use crate::models::tokenizer::Tokenizer;
use std::sync::{Arc, OnceLock};

/// The chat template of a file: its source (or why it is not one) and, once first used, the compiled template.
struct Template {
    source: Option<std::result::Result<String, String>>,
    compiled: OnceLock<Option<std::result::Result<ChatTemplate, String>>>,
}

/// A conversation's prompt and how to read the answer to it.
pub struct ChatTurn {
    /// The prompt's ids.
    pub ids: Vec<u32>,
    /// Separates the answer's reasoning from its text, fed the generated text.
    pub reasoning: ReasoningSplitter,
}

/// Makes a model's prompts as token ids: text through its tokenizer, a conversation through its chat template.
/// Cheap to clone and usable from any thread ([`crate::models::LanguageModel::prompter`]).
#[derive(Clone)]
pub struct Prompter {
    tokenizer: Arc<Tokenizer>,
    template: Arc<Template>,
    /// The model file's name, for the errors of its chat template.
    file: Arc<str>,
    /// The KV cache's positions: the longest prompt.
    context: usize,
}

impl Prompter {
    /// `template_source` is the file's `tokenizer.chat_template` (or why it cannot be one), compiled when a chat
    /// first needs it: a template that does not compile (or is hostile) fails chat only.
    pub(crate) fn new(
        tokenizer: Arc<Tokenizer>,
        template_source: Option<std::result::Result<String, String>>,
        file: &str,
        context: usize,
    ) -> Prompter {
        let template = Arc::new(Template { source: template_source, compiled: OnceLock::new() });
        Prompter { tokenizer, template, file: file.into(), context }
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// `text` as ids, as [`Tokenizer::encode_within`] the model's context.
    ///
    /// # Errors
    /// As [`Tokenizer::encode_within`]: text longer than the context can hold.
    pub fn text(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode_within(text, self.context)
    }

    /// The prompt of a conversation: the file's chat template applied to `messages`, ending with the
    /// assistant's turn opened, as ids.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the file has no chat template, it does not compile (the message says why;
    /// plain generation works all the same), rendering fails, or the prompt is longer than the context.
    pub fn chat(&self, messages: &[Message]) -> Result<Vec<u32>> {
        self.chat_turn(messages).map(|turn| turn.ids)
    }

    /// How the model's output separates reasoning from answer ([`ReasoningFormat::of_vocabulary`]).
    pub fn reasoning_format(&self) -> ReasoningFormat {
        ReasoningFormat::of_vocabulary(|t| self.tokenizer.inner().token_to_id(t).is_some())
    }

    /// [`Prompter::chat`], with the splitter of the answer's reasoning from its text ([`ReasoningSplitter`], set
    /// for the rendered prompt: a template that opens the reasoning block itself starts the output inside it).
    ///
    /// # Errors
    /// As [`Prompter::chat`].
    pub fn chat_turn(&self, messages: &[Message]) -> Result<ChatTurn> {
        let t = self.chat_template().ok_or_else(|| Error::InvalidArgument {
            op: "chat",
            reason: self.chat_template_error().unwrap_or_default(),
        })?;
        let tk = &self.tokenizer;
        let text = t.render(messages, true, &tk.bos_text, &tk.eos_text).map_err(|e| match e {
            Error::InvalidArgument { reason, .. } => Error::InvalidArgument {
                op: "chat",
                reason: format!("{}: the chat template failed: {reason}", self.file),
            },
            // the machine's limits stay what they are (a server answers them 503, not 400)
            other => other,
        })?;
        let mut ids = tk.encode_within(&text, self.context)?;
        // a template that writes the BOS token itself gets no second one
        if tk.bos.is_some() && ids.len() > 1 && ids[0] == ids[1] && Some(ids[0]) == tk.bos {
            ids.remove(0);
        }
        Ok(ChatTurn { ids, reasoning: ReasoningSplitter::new(self.reasoning_format(), &text) })
    }

    /// The chat template from the file's `tokenizer.chat_template`, if it has one that compiles.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.compiled().as_ref().and_then(|t| t.as_ref().ok())
    }

    fn compiled(&self) -> &Option<std::result::Result<ChatTemplate, String>> {
        self.template.compiled.get_or_init(|| {
            self.template.source.as_ref().map(|src| {
                let src = src.as_ref().map_err(String::clone)?;
                ChatTemplate::new(src)
                    .map_err(|e| format!("the model's chat template (tokenizer.chat_template) does not compile: {e}"))
            })
        })
    }

    /// Why the file's chat template cannot be used: it has none, or it does not compile (`None` when it can).
    pub fn chat_template_error(&self) -> Option<String> {
        match self.compiled() {
            None => Some(format!("{}: the model file has no chat template (tokenizer.chat_template)", self.file)),
            Some(Err(e)) => Some(format!("{}: {e}", self.file)),
            Some(Ok(_)) => None,
        }
    }
}
