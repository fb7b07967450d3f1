//! ggml's examples/simple, reproduced: `ggml_mul_mat(A, B)` with A 4x2 and B 3x2 is B·Aᵀ, a 3x4 matrix.
//! Runs on the best device and, when that is a GPU, on the CPU backend too, printing each result under its
//! device's name.
//!
//! `cargo run --example simple`

use webtensor::{DType, Device, Graph, HostTensor};

fn main() -> webtensor::Result<()> {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[4, 2])?;
    let b = g.input("b", DType::F32, &[3, 2])?;
    let at = g.t(a)?; // a view: Aᵀ is read in place
    let c = g.matmul(b, at)?;
    let av = HostTensor::f32(&[4, 2], vec![2., 8., 5., 1., 4., 2., 8., 6.])?;
    let bv = HostTensor::f32(&[3, 2], vec![10., 5., 9., 9., 5., 4.])?;

    let best = Device::best()?;
    let devices = if best.is_cpu() { vec![best] } else { vec![best, Device::cpu()] };
    for device in devices {
        let caps = device.capabilities();
        println!("mul mat ({} on {}) (transposed result):", caps.name, caps.backend);
        let out = device.compile(&g, &[c])?.run(&[(a, &av), (b, &bv)])?;
        for row in out[0].data.to_f32().chunks(4) {
            println!("[ {} ]", row.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(" "));
        }
    }
    Ok(())
}
