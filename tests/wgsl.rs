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
        // Only the capability the variant declares: a variant without f16 must validate without it (B23).
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
