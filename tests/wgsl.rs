//! Every WGSL variant the compiler can emit is parsed and validated with naga. Needs no GPU.

use naga::valid::{Capabilities, ValidationFlags, Validator};

#[test]
fn every_variant_parses_and_validates() {
    let variants = webtensor::testing::wgsl_variants();
    assert!(variants.len() > 50, "expected the full variant list, got {}", variants.len());
    let mut failures = Vec::new();
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
        if src.contains("subgroupAdd") {
            caps |= Capabilities::SUBGROUP;
        }
        if let Err(e) = Validator::new(ValidationFlags::all(), caps).validate(&module) {
            failures.push(format!("{name}: {}", e.emit_to_string(src)));
        }
    }
    println!("{} WGSL variants validated, {} failed", variants.len(), failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
