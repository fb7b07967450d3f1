//! Continuous batching (`models::decoder::Batch`) with SmolLM2-135M-Instruct: a request's greedy tokens are the same
//! alone (the single-sequence runner, `LanguageModel::generate`) and decoded in one step with others that join at
//! different steps, have prompts of different lengths (read in chunks over several steps) and leave early, on the
//! CPU backend and the GPU devices of the suite; and the CPU's attention over split keys, whose rows have the
//! same bits alone and in a batch.
#![cfg(feature = "cli")]

mod common;

use std::collections::HashMap;
use webtensor::models::decoder::batch::{Batch, BatchEvent, BatchOptions, SeqId};
use webtensor::models::{
    GenerateOptions, Generation, LanguageModel, LanguageModelOptions, SamplingOptions, StopReason,
};
use webtensor::Device;

const PROMPTS: [&str; 8] = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "1, 1, 2, 3, 5, 8,",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at a temperature of",
    "A list of fruits: apple, banana,",
    "In 1969, the first humans to walk on the Moon were",
];

fn load(device: &Device) -> Option<LanguageModel> {
    load_with(device, 256)
}

fn load_with(device: &Device, max_chunk: usize) -> Option<LanguageModel> {
    let path = common::smollm2_path()?;
    Some(
        LanguageModel::load(device, &path, LanguageModelOptions { context: 128, max_chunk, ..Default::default() })
            .unwrap(),
    )
}

fn greedy(n: usize) -> GenerateOptions {
    GenerateOptions { max_tokens: n, ..Default::default() }
}

/// Runs the batch until every sequence has ended, adding `joins[k]` = (step, prompt, options) at its step and
/// cancelling `cancel` = (step, index of the join) then; the finished generations by join index, checking each
/// sequence's streamed text against its final text.
fn run(
    batch: &mut Batch,
    joins: &[(usize, Vec<u32>, GenerateOptions)],
    cancel: Option<(usize, usize)>,
) -> HashMap<usize, Generation> {
    let (mut ids, mut texts, mut done) =
        (HashMap::<SeqId, usize>::new(), HashMap::<usize, String>::new(), HashMap::new());
    let mut step = 0;
    while done.len() < joins.len() {
        for (k, (at, prompt, opts)) in joins.iter().enumerate() {
            if *at == step {
                ids.insert(batch.add(prompt, opts).unwrap(), k);
            }
        }
        if let Some((_, k)) = cancel.filter(|c| c.0 == step) {
            let id = *ids.iter().find(|(_, &v)| v == k).unwrap().0;
            if let Some(g) = batch.cancel(id) {
                done.insert(k, g);
            }
        }
        for e in batch.step().unwrap() {
            match e {
                BatchEvent::Token(id, t) => texts.entry(ids[&id]).or_default().push_str(&t.text),
                BatchEvent::Finished(id, g) => {
                    done.insert(ids[&id], g);
                }
            }
        }
        step += 1;
        assert!(step < 1000, "the batch did not finish");
    }
    for (k, g) in &done {
        if g.stop != StopReason::Cancelled {
            assert_eq!(texts.get(k).map_or("", String::as_str), g.text, "streamed text of sequence {k}");
        }
    }
    assert_eq!(batch.active(), 0, "every slot free afterwards");
    done
}

#[test]
fn batched_greedy_tokens_equal_each_request_alone() {
    for device in common::devices() {
        let Some(mut alone_model) = load(device) else { return };
        // lavapipe takes about a second a decode step: fewer sequences and tokens there
        let (n_seq, n_tok) = if common::full_on(device) { (8, 12) } else { (3, 3) };
        let prompts: Vec<Vec<u32>> =
            PROMPTS[..n_seq].iter().map(|p| alone_model.tokenizer.encode(p).unwrap()).collect();
        let alone: Vec<Vec<u32>> = prompts
            .iter()
            .map(|p| {
                alone_model.reset();
                alone_model.generate(p, &greedy(n_tok), |_, _| true).unwrap().tokens
            })
            .collect();
        drop(alone_model);
        let slots = n_seq.clamp(2, 4);
        let mut batch = Batch::new(load(device).unwrap(), BatchOptions { slots, prefill_tokens: 16 }).unwrap();
        // joins at different steps, more sequences than slots over the run (a slot reused), mixed lengths
        let mut pending: Vec<(usize, Vec<u32>, GenerateOptions)> = vec![];
        for (k, p) in prompts.iter().enumerate() {
            pending.push((k % slots * 2, p.clone(), greedy(n_tok)));
        }
        let first: Vec<_> = pending.iter().take(slots).cloned().collect();
        let got = run(&mut batch, &first, None);
        let rest: Vec<_> = pending.iter().skip(slots).map(|(at, p, o)| (*at, p.clone(), o.clone())).collect();
        let got_rest = run(&mut batch, &rest, None);
        for (k, want) in alone.iter().enumerate() {
            let g = if k < slots { &got[&k] } else { &got_rest[&(k - slots)] };
            assert_eq!(
                &g.tokens,
                want,
                "{}: sequence {k} ({:?}) batched vs alone",
                device.capabilities().name,
                PROMPTS[k]
            );
        }
    }
}

#[test]
fn a_sequence_leaves_mid_prompt_and_the_others_go_on() {
    let device = Device::cpu();
    // prompts read in chunks of at most 4 tokens: a cached start is reused in whole chunks
    let Some(mut m) = load_with(&device, 4) else { return };
    let long: Vec<u32> = m.tokenizer.encode(&PROMPTS[1].repeat(3)).unwrap();
    let short = m.tokenizer.encode(PROMPTS[0]).unwrap();
    let want = m.generate(&short, &greedy(8), |_, _| true).unwrap().tokens;
    let mut batch = Batch::new(m, BatchOptions { slots: 2, prefill_tokens: 8 }).unwrap();
    let sampled = GenerateOptions { max_tokens: 8, sampling: SamplingOptions::chat(7), ..Default::default() };
    let joins = [(0, long.clone(), sampled), (0, short.clone(), greedy(8))];
    let got = run(&mut batch, &joins, Some((2, 0)));
    assert_eq!(got[&0].stop, StopReason::Cancelled);
    assert!(got[&0].prefill_tokens < long.len(), "cancelled while reading its prompt");
    assert_eq!(got[&1].tokens, want, "the other sequence is unaffected");
    // the slot is reused, and a prompt that starts like the cached one reads only the rest from the last whole
    // chunk on (so in the same chunks as without the cache)
    let again = run(&mut batch, &[(0, short.clone(), greedy(8))], None);
    assert_eq!(again[&0].tokens, want);
    let keep = (short.len() - 1) / 4 * 4;
    assert!(keep > 0);
    assert_eq!(again[&0].prefill_tokens, short.len() - keep, "the cached whole chunks are not read again");
}

#[test]
fn bad_requests_are_errors() {
    let Some(m) = load(&Device::cpu()) else { return };
    let p = m.tokenizer.encode(PROMPTS[0]).unwrap();
    let mut batch = Batch::new(m, BatchOptions { slots: 1, prefill_tokens: 16 }).unwrap();
    let too_long = vec![1u32; 200];
    let e = batch.add(&too_long, &greedy(4)).unwrap_err().to_string();
    assert!(e.contains("200") && e.contains("128"), "{e}");
    assert!(batch.add(&[u32::MAX], &greedy(4)).is_err());
    batch.add(&p, &greedy(4)).unwrap();
    let e = batch.add(&p, &greedy(4)).unwrap_err().to_string();
    assert!(e.contains("busy"), "{e}");
    assert!(Batch::new(load(&Device::cpu()).unwrap(), BatchOptions { slots: 0, prefill_tokens: 1 }).is_err());
    // no tokens asked: the prompt is read, nothing generated, the slot freed
    let mut batch = Batch::new(load(&Device::cpu()).unwrap(), BatchOptions { slots: 1, prefill_tokens: 16 }).unwrap();
    let got = run(&mut batch, &[(0, p.clone(), greedy(0))], None);
    assert_eq!((got[&0].tokens.len(), got[&0].stop), (0, StopReason::MaxTokens));
}

#[test]
fn ignore_eos_goes_on_to_the_token_limit() {
    let Some(mut m) = load(&Device::cpu()) else { return };
    let prompt = m.chat_prompt(&[webtensor::models::Message::new("user", "What is 2 + 2?")]).unwrap();
    let ended = m.generate(&prompt, &greedy(48), |_, _| true).unwrap();
    assert_eq!(ended.stop, StopReason::EndOfGeneration, "{:?}", ended.text);
    let opts = GenerateOptions { ignore_eos: true, ..greedy(48) };
    m.reset();
    let alone = m.generate(&prompt, &opts, |_, _| true).unwrap();
    assert_eq!((alone.stop, alone.tokens.len()), (StopReason::MaxTokens, 48));
    assert!(alone.tokens.iter().all(|&t| !m.tokenizer.is_eog(t)));
    assert_eq!(alone.tokens[..ended.tokens.len()], ended.tokens[..], "the same answer up to the end token");
    let mut batch = Batch::new(m, BatchOptions { slots: 2, prefill_tokens: 64 }).unwrap();
    let got = run(&mut batch, &[(0, prompt.clone(), opts.clone()), (1, prompt, greedy(48))], None);
    assert_eq!(got[&0].tokens, alone.tokens, "batched as alone");
    assert_eq!(got[&1].tokens, ended.tokens);
}

/// A decode row's attention on the CPU backend over keys it splits (600 of them, in runs of 256) has the same
/// bits alone (a run-time KV length) as in a batch beside a longer row (a padding mask over 900 keys): the splits
/// are fixed runs of keys, whatever the batch, the run's length or the threads.
#[test]
fn cpu_split_attention_rows_do_not_depend_on_the_batch() {
    use webtensor::DType::{F16, F32, I32};
    use webtensor::{Attention, Data, Graph, HostTensor, Tensor};
    let mut seed = 0x5eed_u64;
    let mut next = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((seed >> 40) as f32) / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    let (h, hkv, d, len, s) = (4, 2, 32, 600, 900);
    let q: Vec<f32> = (0..2 * h * d).map(|_| next()).collect();
    let kv = |next: &mut dyn FnMut() -> f32| -> Vec<half::f16> {
        (0..2 * hkv * s * d).map(|_| half::f16::from_f32(next())).collect()
    };
    let (k, v) = (kv(&mut next), kv(&mut next));
    let cpu = Device::cpu();
    // alone: batch element 0's first 700 keys, a run-time length of 600
    let alone = {
        let mut g = Graph::new();
        let qi = g.input("q", F32, &[1, h, 1, d]).unwrap();
        let ki = g.input("k", F16, &[1, hkv, 700, d]).unwrap();
        let vi = g.input("v", F16, &[1, hkv, 700, d]).unwrap();
        let li = g.input("len", I32, &[1]).unwrap();
        let o = g
            .attention(qi, ki, vi, &Attention { scale: 0.2, causal: true, mask: None, kv_len: Some(li), sinks: None })
            .unwrap();
        let first = |x: &[half::f16]| -> Vec<half::f16> {
            (0..hkv).flat_map(|gi| x[gi * s * d..(gi * s + 700) * d].to_vec()).collect()
        };
        let ins = [
            HostTensor::f32(&[1, h, 1, d], q[..h * d].to_vec()).unwrap(),
            HostTensor::new(&[1, hkv, 700, d], Data::F16(first(&k))).unwrap(),
            HostTensor::new(&[1, hkv, 700, d], Data::F16(first(&v))).unwrap(),
            HostTensor::new(&[1], Data::I32(vec![len as i32])).unwrap(),
        ];
        let mut plan = cpu.compile(&g, &[o]).unwrap();
        let inputs: Vec<(Tensor, &HostTensor)> = [qi, ki, vi, li].into_iter().zip(&ins).collect();
        plan.run(&inputs).unwrap().remove(0).data.into_f32()
    };
    // in a batch of two over 900 keys: element 0 masked past its 600, element 1 sees all 900
    let batched = {
        let mut g = Graph::new();
        let qi = g.input("q", F32, &[2, h, 1, d]).unwrap();
        let ki = g.input("k", F16, &[2, hkv, s, d]).unwrap();
        let vi = g.input("v", F16, &[2, hkv, s, d]).unwrap();
        let mi = g.input("mask", F32, &[2, 1, 1, s]).unwrap();
        let o = g
            .attention(qi, ki, vi, &Attention { scale: 0.2, causal: false, mask: Some(mi), kv_len: None, sinks: None })
            .unwrap();
        let mask: Vec<f32> = (0..2 * s).map(|i| if i < len || i >= s { 0.0 } else { f32::NEG_INFINITY }).collect();
        let ins = [
            HostTensor::f32(&[2, h, 1, d], q.clone()).unwrap(),
            HostTensor::new(&[2, hkv, s, d], Data::F16(k.clone())).unwrap(),
            HostTensor::new(&[2, hkv, s, d], Data::F16(v.clone())).unwrap(),
            HostTensor::f32(&[2, 1, 1, s], mask).unwrap(),
        ];
        let mut plan = cpu.compile(&g, &[o]).unwrap();
        let inputs: Vec<(Tensor, &HostTensor)> = [qi, ki, vi, mi].into_iter().zip(&ins).collect();
        plan.run(&inputs).unwrap().remove(0).data.into_f32()
    };
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert!(alone.iter().all(|v| v.is_finite() && *v != 0.0), "{alone:?}");
    assert_eq!(bits(&alone), bits(&batched[..h * d]), "batch element 0 differs from the row alone");
}
