//! A reasoning model's answer apart from its reasoning, as llama-server's chat parser separates them
//! (`reasoning_content` beside `content`): the two ways today's models write it, recognized from their vocabulary.
//!
//! - [`ReasoningFormat::Think`]: the reasoning between `<think>` and `</think>` (Qwen3, DeepSeek-R1 and its
//!   distills), the chat template sometimes opening the block in the prompt itself (then the output starts inside
//!   it).
//! - [`ReasoningFormat::Harmony`]: OpenAI's harmony messages (gpt-oss): `<|channel|>analysis<|message|>...<|end|>`
//!   is reasoning, `<|start|>assistant<|channel|>final<|message|>...` the answer, a `commentary` message's text
//!   (a tool call's preamble) part of the answer; the tokens that frame messages are never printed.
//!
//! [`ReasoningSplitter`] takes the generated text piece by piece (as a stream emits it) and gives each piece's
//! reasoning and answer parts, holding back only the end of a piece that may begin a marker.

/// How a model's output separates its reasoning from its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningFormat {
    /// All output is the answer.
    None,
    /// `<think>…</think>` blocks are reasoning.
    Think,
    /// Harmony messages: the `analysis` channel is reasoning, the `final` and `commentary` ones the answer.
    Harmony,
}

impl ReasoningFormat {
    /// The format of a vocabulary: harmony where it has `<|channel|>` and `<|message|>` tokens, think blocks where
    /// it has `<think>` and `</think>`, else none.
    pub fn of_vocabulary(has_token: impl Fn(&str) -> bool) -> ReasoningFormat {
        if has_token("<|channel|>") && has_token("<|message|>") {
            ReasoningFormat::Harmony
        } else if has_token("<think>") && has_token("</think>") {
            ReasoningFormat::Think
        } else {
            ReasoningFormat::None
        }
    }
}

/// A part of the output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    Reasoning(String),
    Answer(String),
}

/// Where the splitter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// In the answer.
    Answer,
    /// In a think block or an analysis message.
    Reasoning,
    /// In a harmony message's header (between `<|start|>` and `<|message|>`).
    Header,
}

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
/// What ends a harmony message's body (and begins the next header).
const HARMONY_ENDS: [&str; 4] = ["<|end|>", "<|return|>", "<|call|>", "<|start|>"];
const HARMONY_MESSAGE: &str = "<|message|>";

/// Splits generated text into reasoning and answer as it streams (see the module's documentation).
#[derive(Clone, Debug)]
pub struct ReasoningSplitter {
    format: ReasoningFormat,
    state: State,
    /// Text not yet given out: the start of a possible marker, or a harmony header.
    held: String,
    /// Whitespace at the start of the answer's next text is dropped (what follows a reasoning block).
    trim: bool,
}

impl ReasoningSplitter {
    /// A splitter for output in `format` that follows `prompt` (the rendered chat prompt): think-format output
    /// starts inside the reasoning where the prompt ends with an open `<think>`; harmony output starts in a
    /// message's header (the prompt ends with `<|start|>assistant`).
    pub fn new(format: ReasoningFormat, prompt: &str) -> ReasoningSplitter {
        let state = match format {
            ReasoningFormat::None => State::Answer,
            ReasoningFormat::Think if prompt.trim_end().ends_with(THINK_OPEN) => State::Reasoning,
            ReasoningFormat::Think => State::Answer,
            ReasoningFormat::Harmony => State::Header,
        };
        ReasoningSplitter { format, state, held: String::new(), trim: format != ReasoningFormat::None }
    }

    /// The parts of the next piece of output (empty while a marker may be forming).
    pub fn push(&mut self, piece: &str) -> Vec<Part> {
        self.held.push_str(piece);
        let mut parts = Vec::new();
        loop {
            let markers: &[&str] = match (self.format, self.state) {
                (ReasoningFormat::None, _) => &[],
                (ReasoningFormat::Think, State::Reasoning) => &[THINK_CLOSE],
                (ReasoningFormat::Think, _) => &[THINK_OPEN],
                (ReasoningFormat::Harmony, State::Header) => &[HARMONY_MESSAGE],
                (ReasoningFormat::Harmony, _) => &HARMONY_ENDS,
            };
            match first_marker(&self.held, markers) {
                Some((at, marker)) => {
                    let before = self.held[..at].to_string();
                    self.held.drain(..at + marker.len());
                    self.emit(&before, &mut parts);
                    self.on_marker(marker, &before);
                }
                None => {
                    // all but a tail that may begin a marker (a harmony header is held whole)
                    let keep =
                        if self.state == State::Header { self.held.len() } else { partial_tail(&self.held, markers) };
                    let out: String = self.held.drain(..self.held.len() - keep).collect();
                    self.emit(&out, &mut parts);
                    return parts;
                }
            }
        }
    }

    /// The parts left at the end of the output: a held tail, or a header no message followed (as answer).
    pub fn finish(&mut self) -> Vec<Part> {
        let rest = std::mem::take(&mut self.held);
        let mut parts = Vec::new();
        if self.state == State::Header {
            self.state = State::Answer;
        }
        self.emit(&rest, &mut parts);
        parts
    }

    /// Splits a whole output: (reasoning, answer).
    pub fn split(mut self, text: &str) -> (String, String) {
        let (mut reasoning, mut answer) = (String::new(), String::new());
        for part in self.push(text).into_iter().chain(self.finish()) {
            match part {
                Part::Reasoning(r) => reasoning.push_str(&r),
                Part::Answer(a) => answer.push_str(&a),
            }
        }
        (reasoning, answer)
    }

    fn emit(&mut self, text: &str, parts: &mut Vec<Part>) {
        match self.state {
            State::Header => {}
            State::Reasoning if !text.is_empty() => parts.push(Part::Reasoning(text.to_string())),
            State::Answer => {
                let text = if self.trim { text.trim_start() } else { text };
                if !text.is_empty() {
                    self.trim = false;
                    parts.push(Part::Answer(text.to_string()));
                }
            }
            State::Reasoning => {}
        }
    }

    /// The state after `marker`; `header` is the header text a `<|message|>` closes.
    fn on_marker(&mut self, marker: &str, header: &str) {
        self.trim |= self.state == State::Reasoning;
        self.state = match marker {
            THINK_OPEN => State::Reasoning,
            THINK_CLOSE => State::Answer,
            HARMONY_MESSAGE => match channel(header) {
                Some("analysis") => State::Reasoning,
                _ => State::Answer,
            },
            _ => State::Header,
        };
    }
}

/// The channel a harmony header names (`assistant<|channel|>final <|constrain|>json`: `final`).
fn channel(header: &str) -> Option<&str> {
    let after = header.split("<|channel|>").nth(1)?;
    after.split(|c: char| c.is_whitespace() || c == '<').next().filter(|c| !c.is_empty())
}

/// The first of `markers` in `text`: its byte offset and the marker.
fn first_marker<'a>(text: &str, markers: &[&'a str]) -> Option<(usize, &'a str)> {
    markers.iter().filter_map(|m| text.find(m).map(|at| (at, *m))).min_by_key(|&(at, _)| at)
}

/// Bytes at the end of `text` that begin some marker (held until the next piece shows whether they complete it).
fn partial_tail(text: &str, markers: &[&str]) -> usize {
    (1..=text.len())
        .rev()
        .filter(|&n| text.is_char_boundary(text.len() - n))
        .find(|&n| markers.iter().any(|m| m.len() > n && m.starts_with(&text[text.len() - n..])))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::{Part, ReasoningFormat as F, ReasoningSplitter};

    /// The output given in pieces of every size from 1 byte: the same reasoning and answer as given whole.
    fn split_in_pieces(format: F, prompt: &str, text: &str) -> (String, String) {
        let whole = ReasoningSplitter::new(format, prompt).split(text);
        for size in 1..=text.len() {
            let mut s = ReasoningSplitter::new(format, prompt);
            let (mut r, mut a) = (String::new(), String::new());
            let mut i = 0;
            while i < text.len() {
                let mut j = (i + size).min(text.len());
                while !text.is_char_boundary(j) {
                    j += 1;
                }
                for p in s.push(&text[i..j]) {
                    match p {
                        Part::Reasoning(x) => r.push_str(&x),
                        Part::Answer(x) => a.push_str(&x),
                    }
                }
                i = j;
            }
            for p in s.finish() {
                match p {
                    Part::Reasoning(x) => r.push_str(&x),
                    Part::Answer(x) => a.push_str(&x),
                }
            }
            assert_eq!((r, a), whole, "pieces of {size}");
        }
        whole
    }

    #[test]
    fn harmony_analysis_is_reasoning_and_final_the_answer() {
        let out = "<|channel|>analysis<|message|>The user greets; reply.<|end|><|start|>assistant<|channel|>final\
                   <|message|>Hello! 👋 How can I help?";
        let (r, a) = split_in_pieces(F::Harmony, "<|start|>assistant", out);
        assert_eq!((r.as_str(), a.as_str()), ("The user greets; reply.", "Hello! 👋 How can I help?"));
        // a final message with a content type; a commentary preamble is part of the answer
        let out = "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>final \
                   <|constrain|>json<|message|>{\"a\": 1}<|return|>";
        assert_eq!(split_in_pieces(F::Harmony, "", out), (String::new(), "Checking.{\"a\": 1}".into()));
        // a model that writes no header at all: its text is the answer
        assert_eq!(split_in_pieces(F::Harmony, "", "just text <|"), (String::new(), "just text <|".into()));
    }

    #[test]
    fn think_blocks_are_reasoning_opened_in_the_prompt_or_the_output() {
        let out = "<think>\nLet me see: 2 + 2.\n</think>\n\nIt is 4.";
        let (r, a) = split_in_pieces(F::Think, "<|im_start|>assistant\n", out);
        assert_eq!((r.as_str(), a.as_str()), ("\nLet me see: 2 + 2.\n", "It is 4."));
        let (r, a) = split_in_pieces(F::Think, "<｜Assistant｜><think>\n", "Hmm.\n</think>\n\nYes <thi");
        assert_eq!((r.as_str(), a.as_str()), ("Hmm.\n", "Yes <thi"));
        // no format: everything is the answer, whitespace included
        assert_eq!(split_in_pieces(F::None, "", " <think>x</think>"), (String::new(), " <think>x</think>".into()));
    }
}
