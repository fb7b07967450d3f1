//! Kernel snapshot, in the style of tinygrad's process replay: every WGSL variant the compiler can emit is
//! rendered and hashed, and the hashes are compared with `tests/snapshots/kernels.txt`. A change to any kernel's
//! text fails this test until the file is regenerated with `WEBTENSOR_UPDATE_SNAPSHOT=1 cargo test --test
//! kernels`, so that every kernel change is deliberate and shows in review as a changed line. Needs no GPU.

use std::collections::BTreeMap;

/// FNV-1a, 64 bits: stable across platforms and Rust versions (std's hasher is not).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

#[test]
fn kernel_snapshot_is_unchanged() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots/kernels.txt");
    let current: BTreeMap<String, String> = webtensor::testing::wgsl_variants()
        .into_iter()
        .map(|(name, src)| (name, format!("{:016x}", fnv1a(&src))))
        .collect();
    let text: String = current.iter().map(|(name, hash)| format!("{hash} {name}\n")).collect();
    if std::env::var("WEBTENSOR_UPDATE_SNAPSHOT").as_deref() == Ok("1") {
        std::fs::write(path, &text).expect("writing the snapshot");
        println!("wrote {} kernel hashes to {path}", current.len());
        return;
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    let old: BTreeMap<String, String> =
        committed.lines().filter_map(|l| l.split_once(' ').map(|(h, n)| (n.to_string(), h.to_string()))).collect();
    let mut report = Vec::new();
    for (name, hash) in &current {
        match old.get(name) {
            None => report.push(format!("new kernel:     {name}")),
            Some(h) if h != hash => report.push(format!("changed kernel: {name}")),
            _ => {}
        }
    }
    report.extend(old.keys().filter(|n| !current.contains_key(*n)).map(|n| format!("removed kernel: {n}")));
    assert!(
        report.is_empty(),
        "{} kernel(s) differ from tests/snapshots/kernels.txt (regenerate with WEBTENSOR_UPDATE_SNAPSHOT=1 \
         cargo test --test kernels once the change is intended):\n{}",
        report.len(),
        report.join("\n")
    );
    println!("{} kernels match the snapshot", current.len());
}
