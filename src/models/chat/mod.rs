//! Chat templates: a model's `tokenizer.chat_template` (Jinja, as Hugging Face's `apply_chat_template` renders it)
//! rendered with the `minijinja` crate, within bounds (`sandbox.rs`).

mod budget;
mod consts;
mod guards;
mod namespace;
mod pyfns;
mod sandbox;

use crate::error::{Error, Result};

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Message {
        Message { role: role.into(), content: content.into() }
    }
}

/// A chat template, checked when made and rendered within bounds (every string the template builds or emits is
/// charged to a budget of 16 MiB per render, instructions to a fuel, the work of `in`, comparisons, filters and
/// methods on large values to a work budget, recursion and the nesting of values to 64 levels, a tag to 512
/// tokens): Hugging Face's Jinja
/// dialect as `apply_chat_template` renders it (`trim_blocks`, `lstrip_blocks`; `raise_exception`,
/// `strftime_now`, Python's `tojson`; Python's string, list and dict methods through minijinja-contrib's
/// `pycompat`; macros, `namespace`, `break`/`continue`).
pub struct ChatTemplate {
    source: String,
    env: minijinja::Environment<'static>,
}

fn err(e: minijinja::Error) -> Error {
    Error::InvalidArgument { op: "chat_template", reason: format!("{e:#}") }
}

impl ChatTemplate {
    /// Compiles `source`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] with the template engine's message for a template that does not parse, uses a
    /// filter webtensor does not offer, has a tag of more than 512 tokens, a constant of more than 65536 items or a constant expression that
    /// would fold into more than 1 MiB,
    /// or is larger than 1 MiB.
    pub fn new(source: &str) -> Result<ChatTemplate> {
        ChatTemplate::with_date(source, None)
    }

    /// [`ChatTemplate::new`] whose `strftime_now` reports the date `today` (year, month, day) instead of today's
    /// (UTC): for reproducible prompts and tests.
    ///
    /// # Errors
    /// As [`ChatTemplate::new`].
    pub fn with_date(source: &str, today: Option<(i64, u32, u32)>) -> Result<ChatTemplate> {
        let compiled = on_deep_stack(|| sandbox::compile(source).map(|t| sandbox::fuel_for(&t)))?;
        let mut env = sandbox::environment(today);
        env.set_fuel(Some(compiled));
        Ok(ChatTemplate { source: source.to_string(), env })
    }

    /// The prompt for `messages`, ending with the assistant's turn opened when `add_generation_prompt`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when rendering fails: the template raising an exception, an undefined
    /// operation, or a bound exceeded (instructions, text built, recursion).
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool, bos: &str, eos: &str) -> Result<String> {
        self.render_with(messages, add_generation_prompt, Some(bos), Some(eos))
    }

    /// [`ChatTemplate::render`] with the special tokens optional: `None` leaves `bos_token` or `eos_token`
    /// undefined, as transformers does for a model whose tokenizer has none.
    ///
    /// # Errors
    /// As [`ChatTemplate::render`].
    pub fn render_with(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        bos: Option<&str>,
        eos: Option<&str>,
    ) -> Result<String> {
        let msgs: Vec<_> =
            messages.iter().map(|m| minijinja::context! { role => m.role, content => m.content }).collect();
        let mut ctx = std::collections::BTreeMap::new();
        ctx.insert("messages", minijinja::Value::from(msgs));
        ctx.insert("add_generation_prompt", minijinja::Value::from(add_generation_prompt));
        if let Some(b) = bos {
            ctx.insert("bos_token", minijinja::Value::from(b));
        }
        if let Some(e) = eos {
            ctx.insert("eos_token", minijinja::Value::from(e));
        }
        let ctx = minijinja::Value::from(ctx);
        let run = || -> std::result::Result<String, minijinja::Error> {
            budget::start_clock();
            let t = sandbox::compile(&self.source)?;
            let mut out = String::new();
            let vm = minijinja::machinery::Vm::new(&self.env);
            let mut output = minijinja::machinery::make_string_output(&mut out);
            vm.eval(&t.instructions, ctx, &t.blocks, &mut output, minijinja::AutoEscape::None)?;
            Ok(out)
        };
        on_deep_stack(run)
    }
}

/// Runs `f` (compiling or rendering a template) on a thread with a 256 MiB stack, natively: minijinja's parser
/// recurses once per `elif`, and dropping or printing nested values recurses once per level, which a hostile
/// template can make tens of thousands deep (the stack is reserved, not used, until needed). On wasm (no
/// threads) in place, where the tag, `elif` and nesting bounds keep the depth small. A panic in the engine on a
/// hostile template is an error, not a crash.
fn on_deep_stack<T: Send>(f: impl FnOnce() -> std::result::Result<T, minijinja::Error> + Send) -> Result<T> {
    let failed = || Error::InvalidArgument { op: "chat_template", reason: "the template engine failed".into() };
    let guarded = move || std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    #[cfg(not(target_arch = "wasm32"))]
    let out = std::thread::scope(|s| {
        let thread = std::thread::Builder::new().name("chat-template".into()).stack_size(256 << 20);
        match thread.spawn_scoped(s, guarded) {
            Ok(h) => Some(h.join().unwrap_or_else(Err)),
            Err(_) => None,
        }
    });
    // no thread to be had (its stack's address space): the machine's limit, not the template's fault
    #[cfg(not(target_arch = "wasm32"))]
    let Some(out) = out
    else {
        return Err(Error::OutOfMemory { what: "a thread for the chat template".into(), bytes: 256 << 20 });
    };
    #[cfg(target_arch = "wasm32")]
    let out = guarded();
    match out {
        Ok(r) => r.map_err(err),
        Err(_) => Err(failed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_chatml_with_python_methods() {
        let src = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content.strip() }}<|im_end|>\n{% endfor %}\
                   {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        let t = ChatTemplate::new(src).unwrap();
        let out = t.render(&[Message::new("user", "  hi ")], true, "", "").unwrap();
        assert_eq!(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
        let bad = ChatTemplate::new("{{ raise_exception('no system role') }}").unwrap();
        assert!(bad.render(&[], false, "", "").unwrap_err().to_string().contains("no system role"));
    }
}
