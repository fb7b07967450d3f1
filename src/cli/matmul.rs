//! `webtensor matmul A B -o C [--transpose-b] [--backend ...]`: C = A @ B (or A @ Bᵀ through the `t()` view,
//! without a copy) with numpy's matmul semantics, batch broadcasting included.

use super::device::{choose_device, describe};
use super::error::CliError;
use super::util;
use webtensor::{io, Graph, HostTensor};

#[derive(clap::Args)]
pub struct MatmulArgs {
    /// Left operand: file.npy or file.safetensors:tensor.name (f32 or f16, rank 1 to 4; a dim may be 0).
    #[arg(value_name = "A")]
    a: String,
    /// Right operand: file.npy, file.safetensors:tensor.name (f32 or f16, rank 1 to 4; a dim may be 0) or file.gguf:tensor.name
    /// (any GGUF dtype, block-quantized ones computed on directly).
    #[arg(value_name = "B")]
    b: String,
    /// Where to write the product, as .npy. An existing file is replaced whole (written beside it, then renamed).
    #[arg(short, long, value_name = "C")]
    output: String,
    /// Multiply by Bᵀ (B's last two axes swapped, read in place): `x @ w.T` for a weight stored [out, in].
    #[arg(long)]
    transpose_b: bool,
    /// Device to run on. Without the flag, Device::best() decides and honours WEBTENSOR_BACKEND; `auto` takes
    /// the best GPU adapter, else the CPU, ignoring that variable.
    #[arg(long, value_parser = crate::cli::device::backend_parser())]
    backend: Option<webtensor::BackendKind>,
}

fn desc(t: &HostTensor) -> String {
    format!("{:?} {}", t.shape, t.dtype())
}

pub fn run(args: &MatmulArgs) -> Result<(), CliError> {
    // Files and shapes first: a bad input fails before any device is opened.
    let a = io::read_tensor(&args.a)?;
    let b = io::read_tensor(&args.b)?;
    if args.transpose_b && b.shape.len() < 2 {
        return Err(CliError::Msg(format!(
            "--transpose-b needs B of rank 2 or more, but {} has shape {:?}",
            args.b, b.shape
        )));
    }
    // a block-quantized B (from a GGUF file) is a resident weight: uploaded as stored, computed on directly
    let quantized = b.dtype().is_storage_format();
    let early = if quantized { Some(choose_device(args.backend)?) } else { None };
    let weight = match &early {
        Some(c) => Some(c.device.upload("B", b.clone())?),
        None => None,
    };
    let mut g = Graph::new();
    let ta = g.input("A", a.dtype(), &a.shape)?;
    let tb = match &weight {
        Some(w) => g.resident(w)?,
        None => g.input("B", b.dtype(), &b.shape)?,
    };
    let rhs = if args.transpose_b { g.t(tb)? } else { tb };
    let tc = g.matmul(ta, rhs).map_err(|e| match e {
        webtensor::Error::ShapeMismatch { .. } if args.transpose_b => {
            CliError::Msg(format!("{e} (the right operand is B {:?} transposed by --transpose-b)", b.shape))
        }
        e => e.into(),
    })?;

    let chosen = match early {
        Some(c) => c,
        None => choose_device(args.backend)?,
    };
    let device = &chosen.device;
    let (plan, compile) = util::timed(|| device.compile(&g, &[tc]));
    let mut plan = plan?;
    let inputs = if quantized { vec![(ta, &a)] } else { vec![(ta, &a), (tb, &b)] };
    let (out, run) = util::timed(|| plan.run(&inputs));
    let c = out?.swap_remove(0);
    io::write_npy(&args.output, &c)?;
    let fallback = if chosen.fell_back {
        format!(", the CPU: {}", crate::cli::device::fallback_reason(&webtensor::Device::adapters()))
    } else {
        String::new()
    };
    eprintln!(
        "matmul: A {} @ {}B {}{} -> C {} written to {} | {}{fallback} | run {:.1} ms (compile {:.1} ms)",
        desc(&a),
        if args.transpose_b { "(" } else { "" },
        desc(&b),
        if args.transpose_b { ")ᵀ" } else { "" },
        desc(&c),
        args.output,
        describe(device),
        util::ms(run),
        util::ms(compile),
    );
    Ok(())
}
