//! The chat-template renderer: any template source compiles or is refused, and renders a conversation or fails,
//! within the renderer's bounds, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use webtensor::models::{ChatTemplate, Message};

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else { return };
    let Ok(t) = ChatTemplate::new(source) else { return };
    let conversation = [
        Message::new("system", "Be brief."),
        Message::new("user", "Hi"),
        Message::new("assistant", "Hello!"),
        Message::new("user", "2+2?"),
    ];
    let _ = t.render(&conversation, true, "<s>", "</s>");
});
