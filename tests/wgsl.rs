//! Every WGSL variant the compiler can emit is parsed and validated with naga. Needs no GPU.

use naga::valid::{Capabilities, ValidationFlags, Validator};

#[test]
fn every_variant_parses_and_validates() {
    let variants = webtensor::testing::wgsl_variants();
    assert!(variants.len() > 50, "expected the full variant list, got {}", variants.len());
    let mut failures = Vec::new();
    let mut coop_variants = 0;
    for (name, src) in &variants {
        assert!(!src.contains("{{"), "{name}: unreplaced template token");
        // an f16 rounding must survive an optimizing shader compiler: never a conversion there and back, which
        // is an identity to it (NVIDIA's driver folded one); f16_round works on the bits
        for pair in ["unpack2x16float(pack2x16float(", "f32(f16(", "f32(f16<"] {
            assert!(!src.contains(pair), "{name}: rounds through `{pair}`, which a compiler may fold");
        }
        if let Some(at) = src.find("fn f16_round(") {
            let body = &src[at..at + src[at..].find("\n}").expect("the function's end")];
            assert!(!body.contains("pack2x16float") && !body.contains("f16("), "{name}: f16_round converts: {body}");
        }
        let uses_f16 = src.contains("enable f16;");
        let mentions_f16 = src.contains("f16>") || src.contains("f16(");
        assert_eq!(uses_f16, mentions_f16, "{name}: f16 used without `enable f16;` or enabled needlessly");
        let module = match naga::front::wgsl::parse_str(src) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{name}: {}", e.emit_to_string(src)));
                continue;
            }
        };
        // Only the capability the variant declares: a variant without f16 must validate without it (adapters without shader-f16).
        let mut caps = if uses_f16 { Capabilities::SHADER_FLOAT16 } else { Capabilities::empty() };
        if src.contains("pack2x16float") {
            // granted by wgpu on every backend with DownlevelFlags::SHADER_F16_IN_F32 (WebGPU: always)
            caps |= Capabilities::SHADER_FLOAT16_IN_FLOAT32;
        }
        if src.contains("subgroupAdd") || src.contains("subgroup_id") {
            caps |= Capabilities::SUBGROUP;
        }
        let coop = src.contains("enable wgpu_cooperative_matrix;");
        assert_eq!(coop, src.contains("coop_mat"), "{name}: cooperative matrices without the enable, or vice versa");
        if coop {
            caps |= Capabilities::COOPERATIVE_MATRIX;
        }
        match Validator::new(ValidationFlags::all(), caps).validate(&module) {
            Err(e) => failures.push(format!("{name}: {}", e.emit_to_string(src))),
            // cooperative matrices exist only on Vulkan here: the variant must also make it through naga's SPIR-V
            // writer (naga 30 crashes there on some valid inputs, e.g. coopStore arguments written inline)
            Ok(info) if coop => {
                coop_variants += 1;
                // as wgpu's Vulkan backend writes it: indices restricted, buffers checked or not (robustness2)
                use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy::*};
                // and the entry point's pipeline, with and without runtime checks
                for (buffer, checks) in [(Restrict, true), (Unchecked, true), (Unchecked, false)] {
                    let options = naga::back::spv::Options {
                        lang_version: (1, 3),
                        flags: naga::back::spv::WriterFlags::empty(),
                        bounds_check_policies: BoundsCheckPolicies { index: Restrict, buffer, ..Default::default() },
                        force_loop_bounding: checks,
                        ..Default::default()
                    };
                    let pipeline = naga::back::spv::PipelineOptions {
                        shader_stage: naga::ShaderStage::Compute,
                        entry_point: "main".into(),
                    };
                    let written = std::panic::catch_unwind(|| {
                        naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline))
                    });
                    match written {
                        Ok(Ok(words)) => assert!(words.len() > 100, "{name}: SPIR-V of {} words", words.len()),
                        Ok(Err(e)) => failures.push(format!("{name}: SPIR-V ({buffer:?} buffers): {e}")),
                        Err(_) => failures.push(format!("{name}: naga's SPIR-V writer panicked ({buffer:?} buffers)")),
                    }
                }
            }
            Ok(_) => {}
        }
    }
    assert!(coop_variants >= 48, "expected the cooperative-matrix variants, got {coop_variants}");
    println!("{coop_variants} cooperative-matrix variants also written as SPIR-V");
    println!("{} WGSL variants validated, {} failed", variants.len(), failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Every kernel family's `struct Params` as WGSL lays it out (naga's layouter, the same rules wgpu validates
/// uniform blocks with) has each field at the byte offset Rust gives it, and fits the 256 bytes a dispatch's
/// uniform block holds.
#[test]
fn params_structs_match_their_rust_layout() {
    let layouts = webtensor::testing::params_layouts();
    assert!(layouts.len() >= 5, "every family: {}", layouts.len());
    for l in layouts {
        let src = format!(
            "{}@group(0) @binding(0) var<uniform> P: Params;\n@compute @workgroup_size(1) fn main() {{ _ = P; }}",
            l.wgsl
        );
        let module =
            naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{}: {}", l.name, e.emit_to_string(&src)));
        let (members, span) = module
            .types
            .iter()
            .find_map(|(_, t)| match &t.inner {
                naga::TypeInner::Struct { members, span } if t.name.as_deref() == Some("Params") => {
                    Some((members.clone(), *span))
                }
                _ => None,
            })
            .expect("struct Params");
        let wgsl: Vec<(String, usize)> =
            members.iter().map(|m| (m.name.clone().unwrap_or_default(), m.offset as usize)).collect();
        let rust: Vec<(String, usize)> = l.offsets.iter().map(|&(n, o)| (n.to_string(), o)).collect();
        assert_eq!(wgsl, rust, "{}: WGSL and Rust field offsets differ", l.name);
        assert!(span as usize >= l.size, "{}: WGSL struct of {span} bytes, Rust {} bytes", l.name, l.size);
        assert!(span <= 256, "{}: {span} bytes do not fit a dispatch's 256-byte uniform block", l.name);
        println!("{}: {} fields, {span} bytes", l.name, wgsl.len());
    }
}

/// Each attention variant declares no more workgroup memory than its lowering counts when it picks the tile that
/// fits the adapter (`testing::attention_shared_bytes`), each variable rounded up to 16 bytes as WebGPU's limit
/// counts it: more would fail to build on an adapter at that limit (WebGPU's 16 KiB).
#[test]
fn attention_workgroup_memory_is_what_the_lowering_counts() {
    let mut checked = 0;
    for (name, src) in webtensor::testing::wgsl_variants() {
        let Some(kind) = name.split("kind: Attention { ").nth(1) else { continue };
        let field = |f: &str| -> u32 {
            let at = kind.find(&format!("{f}: ")).unwrap_or_else(|| panic!("{name}: no {f}")) + f.len() + 2;
            kind[at..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
        };
        let module =
            naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&src)));
        let mut layouter = naga::proc::Layouter::default();
        layouter.update(module.to_ctx()).unwrap();
        let declared: u32 = module
            .global_variables
            .iter()
            .filter(|(_, g)| g.space == naga::AddressSpace::WorkGroup)
            .map(|(_, g)| layouter[g.ty].size.div_ceil(16) * 16) // WebGPU rounds each variable up to 16 bytes
            .sum();
        let counted = webtensor::testing::attention_shared_bytes(field("d"), field("dv"), field("br"), field("bc"));
        assert!(
            declared <= counted,
            "{name}: declares {declared} bytes of workgroup memory, the lowering counts {counted}"
        );
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} attention variants");
}
