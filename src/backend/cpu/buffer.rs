//! Tensor memory as CPU kernels see it: a plan's arena and the caller's input tensors, addressed by storage node,
//! read and written element by element through raw pointers (an in-place step reads and writes the same block),
//! converting between the storage dtype and the f32 the kernels compute in.

use super::widen::widen_f16;
use crate::dtype::DType;
use crate::graph::NodeId;
use crate::shape::Layout;
use half::f16;

/// Where every storage node of a run lives: its base pointer and size in bytes.
pub(crate) struct Memory {
    /// Indexed by node id: the start of the node's storage (null for nodes without storage).
    base: Vec<*mut u8>,
    len: Vec<usize>,
}

// SAFETY: the pointers refer to the plan's arena and the caller's input tensors, both of which outlive the run and
// are only accessed through `Memory` during it. Kernels running on several threads write disjoint elements of a
// step's output and read only storage no step of the same phase writes.
unsafe impl Send for Memory {}
unsafe impl Sync for Memory {}

impl Memory {
    pub(crate) fn new(nodes: usize) -> Memory {
        Memory { base: vec![std::ptr::null_mut(); nodes], len: vec![0; nodes] }
    }

    /// Records that storage node `id` lives at `ptr` (`len` bytes).
    pub(crate) fn set(&mut self, id: NodeId, ptr: *mut u8, len: usize) {
        self.base[id] = ptr;
        self.len[id] = len;
    }

    /// The raw bytes of blocks `range` (block indices) of storage node `id` of `dtype`, for as long as the run.
    pub(crate) fn block_bytes(&self, id: NodeId, dtype: DType, range: std::ops::Range<usize>) -> &[u8] {
        let v = self.view(id, dtype);
        let bytes = v.block_bytes(range);
        // SAFETY: the bytes lie in the node's storage, which outlives `self` (the run), and nothing writes them
        // while the reading step runs.
        unsafe { std::slice::from_raw_parts(bytes.as_ptr(), bytes.len()) }
    }

    /// A reader of storage node `id` as `dtype`.
    pub(crate) fn view(&self, id: NodeId, dtype: DType) -> View {
        let elems = self.len[id] / dtype.block_bytes() * dtype.block_size();
        View { ptr: self.base[id], len: elems, dtype }
    }
}

/// Elements of one storage node, of one dtype. Every access is bounds-checked against the node's storage (an
/// out-of-range index is a bug in lowering, reported as a panic, never a wild read).
#[derive(Clone, Copy)]
pub(crate) struct View {
    ptr: *mut u8,
    /// Elements.
    len: usize,
    dtype: DType,
}

impl View {
    /// Element `i` as f32 (i32 converted by rounding to nearest).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> f32 {
        assert!(i < self.len, "element {i} of a {}-element tensor", self.len);
        // SAFETY: i < len elements of the node's storage, which `Memory` guarantees is live for the run.
        unsafe {
            match self.dtype {
                DType::F32 => (self.ptr as *const f32).add(i).read_unaligned(),
                DType::F16 => (self.ptr as *const f16).add(i).read_unaligned().to_f32(),
                DType::I32 => (self.ptr as *const i32).add(i).read_unaligned() as f32,
                DType::BF16 => f32::from_bits(((self.ptr as *const u16).add(i).read_unaligned() as u32) << 16),
                d => unreachable!("{d} is read through its block decoder, never element by element"),
            }
        }
    }

    /// Element `i` as i32 (floats truncated toward zero, saturating; NaN gives 0).
    #[inline]
    pub(crate) fn get_i32(&self, i: usize) -> i32 {
        assert!(i < self.len, "element {i} of a {}-element tensor", self.len);
        // SAFETY: as in `get`.
        unsafe {
            match self.dtype {
                DType::I32 => (self.ptr as *const i32).add(i).read_unaligned(),
                _ => self.get(i) as i32,
            }
        }
    }

    /// Stores `v` at element `i`, rounded to the view's dtype (i32: truncated toward zero, saturating).
    #[inline]
    pub(crate) fn set(&self, i: usize, v: f32) {
        assert!(i < self.len, "element {i} of a {}-element tensor", self.len);
        // SAFETY: i < len; the caller writes only the elements of its step's output that it owns.
        unsafe {
            match self.dtype {
                DType::F32 => (self.ptr as *mut f32).add(i).write_unaligned(v),
                DType::F16 => (self.ptr as *mut f16).add(i).write_unaligned(f16::from_f32(v)),
                DType::I32 => (self.ptr as *mut i32).add(i).write_unaligned(v as i32),
                DType::BF16 => (self.ptr as *mut half::bf16).add(i).write_unaligned(half::bf16::from_f32(v)),
                d => unreachable!("{d} tensors are never written by a CPU kernel"),
            }
        }
    }

    /// Stores the integer `v` at element `i` (converted for float views).
    #[inline]
    pub(crate) fn set_i32(&self, i: usize, v: i32) {
        match self.dtype {
            DType::I32 => {
                assert!(i < self.len, "element {i} of a {}-element tensor", self.len);
                // SAFETY: as in `set`.
                unsafe { (self.ptr as *mut i32).add(i).write_unaligned(v) }
            }
            _ => self.set(i, v as f32),
        }
    }

    /// The storage as an f32 pointer, when it is f32 (for kernels that hand it to a library).
    pub(crate) fn f32_ptr(&self) -> Option<*const f32> {
        (self.dtype == DType::F32).then_some(self.ptr as *const f32)
    }

    /// The storage as a writable f32 pointer, when it is f32.
    pub(crate) fn f32_mut_ptr(&self) -> Option<*mut f32> {
        (self.dtype == DType::F32).then_some(self.ptr as *mut f32)
    }

    /// Copies elements `range` (whole blocks for block types) of the storage, as stored, into `out`.
    pub(crate) fn copy_bytes(&self, range: std::ops::Range<usize>, out: &mut [u8]) {
        let (bs, bb) = (self.dtype.block_size(), self.dtype.block_bytes());
        assert!(range.end <= self.len && out.len() == range.len() / bs * bb, "a copy inside the storage");
        // SAFETY: the range lies inside the node's live storage; `out` is a distinct host buffer of that length.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(range.start / bs * bb), out.as_mut_ptr(), out.len()) }
    }

    /// The raw bytes of blocks `range` (block indices) of the storage.
    pub(crate) fn block_bytes(&self, range: std::ops::Range<usize>) -> &[u8] {
        let bb = self.dtype.block_bytes();
        assert!(range.end * self.dtype.block_size() <= self.len, "blocks inside the storage");
        // SAFETY: inside the storage (checked), which nothing writes while the reading step runs.
        unsafe { std::slice::from_raw_parts(self.ptr.add(range.start * bb), range.len() * bb) }
    }

    /// The whole storage converted to f32 (f16 widened by vector instructions).
    pub(crate) fn widen_to_f32(self) -> Vec<f32> {
        match self.dtype {
            DType::F16 => {
                // SAFETY: the storage holds `len` f16 elements (2-byte aligned: blocks and inputs are at least
                // 4-byte aligned) and nothing writes it while the reading step runs.
                let src = unsafe { std::slice::from_raw_parts(self.ptr as *const f16, self.len) };
                let mut out = vec![0f32; self.len];
                widen_f16(src, &mut out);
                out
            }
            _ => (0..self.len).map(|i| self.get(i)).collect(),
        }
    }

    /// `out.len()` elements from `start` with stride `stride` (in elements), as f32; fast for contiguous f32
    /// and f16.
    #[inline]
    pub(crate) fn row_f32(&self, start: usize, stride: usize, out: &mut [f32]) {
        let n = out.len();
        if n == 0 {
            return;
        }
        assert!(start + (n - 1) * stride < self.len, "a row inside the storage");
        match (self.dtype, stride) {
            // SAFETY: the row lies inside the storage (checked above), which is live for the run.
            (DType::F32, 1) => {
                out.copy_from_slice(unsafe { std::slice::from_raw_parts((self.ptr as *const f32).add(start), n) })
            }
            (DType::F16, 1) => {
                // SAFETY: as above; f16 storage is 2-byte aligned.
                let src = unsafe { std::slice::from_raw_parts((self.ptr as *const f16).add(start), n) };
                widen_f16(src, out);
            }
            (_, 0) => out.fill(self.get(start)),
            _ => out.iter_mut().enumerate().for_each(|(j, o)| *o = self.get(start + j * stride)),
        }
    }

    /// Stores `vals` at elements `start..start + vals.len()`, rounded to the view's dtype; one copy (or
    /// vectorized conversion) for f32 and f16.
    #[inline]
    pub(crate) fn write_f32(&self, start: usize, vals: &[f32]) {
        let n = vals.len();
        assert!(start + n <= self.len, "a row inside the storage");
        match self.dtype {
            // SAFETY: the row lies inside the storage (checked above); the caller writes only the elements of its
            // step's output that it owns.
            DType::F32 => unsafe {
                std::slice::from_raw_parts_mut((self.ptr as *mut f32).add(start), n).copy_from_slice(vals)
            },
            DType::F16 => {
                use half::slice::HalfFloatSliceExt;
                // SAFETY: as above; f16 storage is 2-byte aligned.
                unsafe { std::slice::from_raw_parts_mut((self.ptr as *mut f16).add(start), n) }
                    .convert_from_f32_slice(vals);
            }
            _ => vals.iter().enumerate().for_each(|(j, &v)| self.set(start + j, v)),
        }
    }

    /// Rows `0..rows` of `width` contiguous elements, row `j` at element `start + j·stride`, as a pointer to the
    /// first element; `None` unless the storage is of `dtype` and every row lies inside it.
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn rows_ptr(
        &self,
        dtype: DType,
        start: usize,
        (rows, stride, width): (usize, usize, usize),
    ) -> Option<*const u8> {
        let end = rows.checked_sub(1)?.checked_mul(stride)?.checked_add(start)?.checked_add(width)?;
        (self.dtype == dtype && end <= self.len).then(|| {
            // SAFETY: start < len (checked above); `Memory` keeps the storage live for the run.
            unsafe { self.ptr.add(start * dtype.block_bytes()) as *const u8 }
        })
    }

    /// Elements in the storage.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// Storage positions of `count` elements of `layout` from flat row-major index `start`, into `out` (an odometer
/// over the coordinates: no division per element).
pub(crate) fn positions(layout: &Layout, start: usize, out: &mut [usize]) {
    let (shape, strides) = layout.padded4();
    let mut c = [0usize; 4];
    let mut rem = start;
    for d in (0..4).rev() {
        c[d] = rem % shape[d];
        rem /= shape[d];
    }
    let mut pos = layout.offset + (0..4).map(|d| c[d] * strides[d]).sum::<usize>();
    for o in out.iter_mut() {
        *o = pos;
        // advance the innermost coordinate, carrying outward
        let mut d = 3;
        loop {
            c[d] += 1;
            pos += strides[d];
            if c[d] < shape[d] || d == 0 {
                break;
            }
            pos -= c[d] * strides[d];
            c[d] = 0;
            d -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_follow_strided_layouts() {
        let l = Layout::contiguous(&[2, 3, 5]).permute(&[2, 0, 1]).unwrap().slice(0, 1, 4).unwrap();
        let mut out = vec![0; 10];
        positions(&l, 7, &mut out);
        let want: Vec<usize> = (7..17).map(|i| l.index_of(i)).collect();
        assert_eq!(out, want);
    }
}
