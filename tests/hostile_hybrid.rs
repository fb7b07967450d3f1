//! Hybrid (gated delta-net) model files a careless converter or a hostile author could write: `ssm.*` sizes that
//! disagree with the tensors or each other, a full-attention interval or layer pattern that names no layer, rope
//! sections that do not sum to the rotary width, prediction layers past the stack. Each must give one error naming
//! the key or tensor and the file; the valid tiny hybrid must load and generate, and its recurrent states must start
//! from zeros for each new sequence.

mod common;

use common::tiny_gguf::{load, refused, Meta, TinyLlama};
use webtensor::models::GenerateOptions;

#[test]
fn the_tiny_hybrid_loads_and_generates_the_same_each_time() {
    let mut m = load(&TinyLlama::hybrid()).unwrap();
    let prompt = m.tokenizer.encode("hello the").unwrap();
    let options = GenerateOptions { max_tokens: 8, ignore_eos: true, ..Default::default() };
    let first = m.generate(&prompt, &options, |_, _| true).unwrap().tokens;
    // another prompt in between, then the first again from the start: the states start from zeros
    m.generate(&m.tokenizer.encode("ll he").unwrap(), &options, |_, _| true).unwrap();
    m.reset();
    assert_eq!(m.generate(&prompt, &options, |_, _| true).unwrap().tokens, first);
}

#[test]
fn ssm_sizes_that_disagree_are_refused() {
    let t = || TinyLlama::hybrid();
    refused("inner size", t().set("qwen35.ssm.inner_size", Meta::U32(12)), &["ssm.inner_size"]);
    refused("group count", t().set("qwen35.ssm.group_count", Meta::U32(3)), &["ssm.group_count"]);
    refused("conv kernel", t().set("qwen35.ssm.conv_kernel", Meta::U32(1)), &["ssm.conv_kernel"]);
    refused("state size vs tensors", t().set("qwen35.ssm.state_size", Meta::U32(2)), &["ssm."]);
    refused("missing key", t().remove("qwen35.ssm.time_step_rank"), &["qwen35.ssm.time_step_rank", "missing"]);
    let mut bad = t();
    bad.tensor("blk.0.ssm_conv1d.weight").shape = vec![16, 3];
    refused("conv tensor", bad, &["blk.0.ssm_conv1d.weight"]);
}

#[test]
fn layer_patterns_that_name_no_layer_are_refused() {
    let t = || TinyLlama::hybrid();
    refused(
        "interval past the stack",
        t().set("qwen35.full_attention_interval", Meta::U32(5)),
        &["full_attention_interval"],
    );
    refused(
        "pattern of the wrong length",
        t().set("qwen35.attention.recurrent_layers", Meta::I32s(vec![1, 0, 1])),
        &["attention.recurrent_layers"],
    );
    refused(
        "pattern without attention",
        t().set("qwen35.attention.recurrent_layers", Meta::I32s(vec![1, 1])),
        &["attention.recurrent_layers", "full-attention"],
    );
    refused(
        "prediction layers past the stack",
        t().set("qwen35.nextn_predict_layers", Meta::U32(2)),
        &["nextn_predict_layers"],
    );
    // the pattern given as the file gives it: layer 0 recurrent, layer 1 attention
    load(&t().set("qwen35.attention.recurrent_layers", Meta::I32s(vec![1, 0]))).unwrap();
}

#[test]
fn rope_sections_must_sum_to_the_rotary_width() {
    let t = TinyLlama::hybrid();
    // heads of 4: 2 rotating pairs
    load(&t.set("qwen35.rope.dimension_sections", Meta::I32s(vec![1, 1, 0, 0]))).unwrap();
    let t = TinyLlama::hybrid().set("qwen35.rope.dimension_sections", Meta::I32s(vec![11, 11, 10, 0]));
    refused("sections", t, &["rope.dimension_sections", "2"]);
}
