//! Chat templates: a model's `tokenizer.chat_template` (Jinja, as Hugging Face's `apply_chat_template` renders it)
//! rendered with the `minijinja` crate.

use crate::{Error, Result};

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

/// A compiled chat template.
pub struct ChatTemplate {
    env: minijinja::Environment<'static>,
}

fn err(e: minijinja::Error) -> Error {
    Error::InvalidArgument { op: "chat_template", reason: format!("{e:#}") }
}

impl ChatTemplate {
    /// Compiles `source`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] with the template engine's message for a template that does not parse.
    pub fn new(source: &str) -> Result<ChatTemplate> {
        let mut env = minijinja::Environment::new();
        env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
        });
        // Hugging Face's templates call Python's str methods (`.strip()`, `.startswith()`): the engine's
        // Python-compatible method table
        env.set_unknown_method_callback(|_state, value, method, args| {
            let s = value.as_str().ok_or_else(|| minijinja::Error::from(minijinja::ErrorKind::UnknownMethod))?;
            let arg = |i: usize| args.get(i).and_then(|a| a.as_str()).unwrap_or("");
            Ok(match method {
                "strip" => s.trim().into(),
                "lstrip" => s.trim_start().into(),
                "rstrip" => s.trim_end().into(),
                "startswith" => s.starts_with(arg(0)).into(),
                "endswith" => s.ends_with(arg(0)).into(),
                "upper" => s.to_uppercase().into(),
                "lower" => s.to_lowercase().into(),
                _ => return Err(minijinja::Error::from(minijinja::ErrorKind::UnknownMethod)),
            })
        });
        env.add_template_owned("chat", source.to_string()).map_err(err)?;
        Ok(ChatTemplate { env })
    }

    /// The prompt for `messages`, ending with the assistant's turn opened when `add_generation_prompt`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when rendering fails (the template raising an exception included).
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool, bos: &str, eos: &str) -> Result<String> {
        let msgs: Vec<_> =
            messages.iter().map(|m| minijinja::context! { role => m.role, content => m.content }).collect();
        let ctx = minijinja::context! {
            messages => msgs, add_generation_prompt => add_generation_prompt, bos_token => bos, eos_token => eos,
        };
        self.env.get_template("chat").and_then(|t| t.render(ctx)).map_err(err)
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
