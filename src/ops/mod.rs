//! Op tables: the vocabulary every stage shares. Each op family is one enum with an `ALL` list, and each op is one
//! row of its family's table: its name (the PyTorch / numpy name), the dtypes it accepts, its CPU function and its
//! WGSL expression. Graph constructors, the wasm bindings, the WGSL variant catalogue and the differential test
//! cases iterate these tables, so a new elementwise op is one table row (plus its f64 reference in the tests).

mod binary;
mod common;
mod glu;
mod precision;
pub(crate) mod reduce;
mod rope;
mod rows;
pub(crate) mod unary;

pub(crate) use binary::for_each_binary;
pub use binary::BinaryOp;
pub use common::Accepts;
pub use glu::GluOp;
pub use precision::MatmulPrecision;
pub(crate) use reduce::for_each_reduce;
pub use reduce::ReduceOp;
pub use rope::{Rope, RopeMode};
pub use rows::RowOp;
pub(crate) use rows::RowParams;
// natively only the enum is generated from the row table (its wasm methods are wasm32-only)
#[cfg_attr(not(target_arch = "wasm32"), allow(unused_imports))]
pub(crate) use rows::for_each_row;
pub(crate) use unary::for_each_unary;
pub use unary::UnaryOp;
