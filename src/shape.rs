//! Shapes and strided layouts (graph-building stage): numpy order, strides and offsets in elements.

use crate::error::{Error, Result};

/// Highest rank a tensor may have.
pub const MAX_RANK: usize = 4;

/// How a tensor's elements sit in its storage: shape, strides and offset, all in **elements**.
///
/// Element `[i0, i1, ..]` lives at `offset + Σ i_d * strides[d]` of the storage buffer. A stride of 0 marks a
/// broadcast dimension. Views (reshape, permute, slice, broadcast) change only the layout, never the data.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Layout {
    /// Dimensions in elements, outermost first (numpy / PyTorch order).
    pub(crate) shape: Vec<usize>,
    /// Distance in elements between neighbours along each dimension.
    pub(crate) strides: Vec<usize>,
    /// Position of element `[0, 0, ..]` in the storage, in elements.
    pub(crate) offset: usize,
}

/// Row-major strides for `shape`, in elements.
pub(crate) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// Checks rank 0..=4 (rank 0 is a scalar; a zero dim makes an empty tensor) and the element count;
/// `op` names the caller in the error.
pub(crate) fn check_shape(op: &'static str, shape: &[usize]) -> Result<()> {
    if shape.len() > MAX_RANK {
        return Err(Error::InvalidShape { op, shape: shape.to_vec(), reason: format!("rank must be 0..={MAX_RANK}") });
    }
    if shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).is_none_or(|n| n > u32::MAX as usize) {
        return Err(Error::InvalidShape {
            op,
            shape: shape.to_vec(),
            reason: format!("more than {} elements", u32::MAX),
        });
    }
    Ok(())
}

/// numpy's broadcasting rule: align right, a dim of 1 stretches. `op` names the caller in the error.
pub(crate) fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() { 1 } else { a[i - (rank - a.len())] };
        let db = if i < rank - b.len() { 1 } else { b[i - (rank - b.len())] };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(Error::ShapeMismatch {
                    op,
                    lhs: a.to_vec(),
                    rhs: b.to_vec(),
                    reason: format!("dimension {i} (from the left of the broadcast shape): {da} vs {db}"),
                })
            }
        };
    }
    Ok(out)
}

impl Layout {
    /// A row-major layout at offset 0.
    pub(crate) fn contiguous(shape: &[usize]) -> Layout {
        Layout { shape: shape.to_vec(), strides: contiguous_strides(shape), offset: 0 }
    }

    /// Number of elements.
    pub(crate) fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Number of dimensions.
    pub(crate) fn rank(&self) -> usize {
        self.shape.len()
    }

    /// True when elements are row-major and dense (offset may be non-zero). Size-1 dims are ignored.
    pub(crate) fn is_contiguous(&self) -> bool {
        let mut expected = 1;
        for d in (0..self.rank()).rev() {
            if self.shape[d] != 1 && self.strides[d] != expected {
                return false;
            }
            expected *= self.shape[d];
        }
        true
    }

    /// One past the largest storage element this layout touches, in elements (0 for an empty layout).
    pub(crate) fn storage_extent(&self) -> usize {
        if self.shape.contains(&0) {
            return 0;
        }
        self.offset + self.shape.iter().zip(&self.strides).map(|(&n, &s)| n.saturating_sub(1) * s).sum::<usize>() + 1
    }

    /// The layout an operand is read through for an op whose output has `shape`: this layout broadcast to it.
    /// Graph constructors validated the broadcast when they recorded the op.
    pub(crate) fn broadcast_operand(&self, shape: &[usize]) -> Layout {
        self.broadcast_to(shape).expect("validated when the node was built")
    }

    /// Storage position of the element at flat row-major index `i`.
    pub(crate) fn index_of(&self, mut i: usize) -> usize {
        let mut pos = self.offset;
        for d in (0..self.rank()).rev() {
            pos += (i % self.shape[d]) * self.strides[d];
            i /= self.shape[d];
        }
        pos
    }

    /// The view with dims reordered: `out.shape[i] = self.shape[dims[i]]` (torch.permute).
    pub(crate) fn permute(&self, dims: &[usize]) -> Result<Layout> {
        let mut seen = [false; MAX_RANK];
        if dims.len() != self.rank() || dims.iter().any(|&d| d >= self.rank() || std::mem::replace(&mut seen[d], true))
        {
            return Err(Error::InvalidAxis {
                op: "permute",
                axis: dims.iter().copied().max().unwrap_or(0) as isize,
                shape: self.shape.clone(),
                reason: format!("{dims:?} is not a permutation of 0..{}", self.rank()),
            });
        }
        Ok(Layout {
            shape: dims.iter().map(|&d| self.shape[d]).collect(),
            strides: dims.iter().map(|&d| self.strides[d]).collect(),
            offset: self.offset,
        })
    }

    /// The view `x[.., start..end, ..]` along `axis` (Python slicing with step 1).
    pub(crate) fn slice(&self, axis: usize, start: usize, end: usize) -> Result<Layout> {
        if axis >= self.rank() || start > end || end > self.shape[axis] {
            return Err(Error::InvalidAxis {
                op: "slice",
                axis: axis as isize,
                shape: self.shape.clone(),
                reason: format!("range {start}..{end} is reversed or out of bounds"),
            });
        }
        let mut out = self.clone();
        out.offset += start * self.strides[axis];
        out.shape[axis] = end - start;
        Ok(out)
    }

    /// The view stretched to `shape` by numpy broadcasting (new leading dims and size-1 dims get stride 0).
    pub(crate) fn broadcast_to(&self, shape: &[usize]) -> Result<Layout> {
        let target = broadcast_shapes("broadcast_to", &self.shape, shape)?;
        if target != shape {
            return Err(Error::ShapeMismatch {
                op: "broadcast_to",
                lhs: self.shape.clone(),
                rhs: shape.to_vec(),
                reason: "the source does not broadcast to the target".into(),
            });
        }
        let lead = shape.len() - self.rank();
        let strides = (0..shape.len())
            .map(|d| if d < lead || self.shape[d - lead] != shape[d] { 0 } else { self.strides[d - lead] })
            .collect();
        Ok(Layout { shape: shape.to_vec(), strides, offset: self.offset })
    }

    /// The same elements under a new shape, without copying; `None` when the strides do not allow it
    /// (the graph then inserts a contiguous copy, as torch.reshape does). A strided view reshapes in place where
    /// each run of its dims that is contiguous in memory (each dim's stride its inner neighbour's stride times
    /// size) maps onto whole dims of the new shape: a column slice `[R, N]` of a wider matrix splits into
    /// `[R, H, D]` (as torch.Tensor.view's stride rule; numpy's `_attempt_nocopy_reshape`).
    pub(crate) fn reshape(&self, shape: &[usize]) -> Option<Layout> {
        if self.is_contiguous() || self.numel() == 0 {
            return Some(Layout { shape: shape.to_vec(), strides: contiguous_strides(shape), offset: self.offset });
        }
        // dims of size 1 have no stride that matters: leave them out of the old layout
        let old: Vec<(usize, usize)> =
            self.shape.iter().zip(&self.strides).filter(|(&n, _)| n != 1).map(|(&n, &s)| (n, s)).collect();
        let mut strides = vec![0; shape.len()];
        let mut next = shape.len(); // new dims not given a stride yet: 0..next
        let mut i = old.len();
        while i > 0 {
            // the run of old dims j..i contiguous in memory, its innermost stride `base`
            let base = old[i - 1].1;
            let (mut j, mut run) = (i - 1, old[i - 1].0);
            while j > 0 && old[j - 1].1 == old[j].1 * old[j].0 {
                j -= 1;
                run *= old[j].0;
            }
            // the new dims it covers, inner first (dims of size 1 taken along)
            let mut covered = 1;
            while next > 0 && (covered < run || shape[next - 1] == 1) {
                next -= 1;
                strides[next] = covered * base;
                covered *= shape[next];
            }
            if covered != run {
                return None;
            }
            i = j;
        }
        (next == 0).then(|| Layout { shape: shape.to_vec(), strides, offset: self.offset })
    }

    /// Shape and strides padded on the left to rank 4 (size 1, stride 0), as kernels consume them.
    pub(crate) fn padded4(&self) -> ([usize; 4], [usize; 4]) {
        let mut shape = [1; 4];
        let mut strides = [0; 4];
        let lead = MAX_RANK - self.rank();
        for d in 0..self.rank() {
            shape[lead + d] = self.shape[d];
            strides[lead + d] = if self.shape[d] == 1 { 0 } else { self.strides[d] };
        }
        (shape, strides)
    }
}

/// Resolves a possibly negative axis (`-1` is the last) against `rank`.
pub(crate) fn resolve_axis(op: &'static str, axis: isize, shape: &[usize]) -> Result<usize> {
    let rank = shape.len() as isize;
    let a = if axis < 0 { axis + rank } else { axis };
    if a < 0 || a >= rank {
        return Err(Error::InvalidAxis { op, axis, shape: shape.to_vec(), reason: format!("rank is {rank}") });
    }
    Ok(a as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reshape of a strided layout that gives a view addresses the same elements as reshaping a copy, and
    /// the views the rule allows are given: split and merged dims of a column slice, a permuted matrix, size-1 dims.
    #[test]
    fn strided_reshape_addresses_the_same_elements() {
        let offsets = |l: &Layout| -> Vec<usize> {
            let n = l.numel();
            (0..n)
                .map(|mut flat| {
                    let mut off = l.offset;
                    for d in (0..l.rank()).rev() {
                        off += (flat % l.shape[d]) * l.strides[d];
                        flat /= l.shape[d];
                    }
                    off
                })
                .collect()
        };
        let slice = Layout { shape: vec![4, 576], strides: vec![960, 1], offset: 576 }; // columns 576..1152 of 960
        let cases: [(&Layout, &[usize], bool); 10] = [
            (&slice, &[4, 9, 64], true),
            (&slice, &[1, 4, 9, 64], true),
            (&slice, &[4, 1, 9, 64, 1], true),
            (&slice, &[2, 2, 576], true),
            (&slice, &[4 * 576], false),
            (&slice, &[8, 288], false),
            (&slice, &[4, 576], true),
            (&Layout { shape: vec![3, 4], strides: vec![1, 3], offset: 0 }, &[12], false),
            (&Layout { shape: vec![3, 4], strides: vec![1, 3], offset: 0 }, &[3, 2, 2], true),
            (&Layout { shape: vec![2, 1, 6], strides: vec![12, 99, 1], offset: 5 }, &[2, 2, 3], true),
        ];
        for (l, shape, view) in cases {
            let got = l.reshape(shape);
            assert_eq!(got.is_some(), view, "{l:?} as {shape:?}: {got:?}");
            if let Some(r) = got {
                assert_eq!(r.shape, shape);
                assert_eq!(offsets(&r), offsets(l), "{l:?} as {shape:?}: {r:?}");
            }
        }
    }

    #[test]
    fn broadcast_rules() {
        assert_eq!(broadcast_shapes("t", &[2, 2], &[2, 1]).unwrap(), vec![2, 2]);
        assert_eq!(broadcast_shapes("t", &[1, 1280, 16, 16], &[1, 1280, 1, 1]).unwrap(), vec![1, 1280, 16, 16]);
        assert_eq!(broadcast_shapes("t", &[3], &[4, 3]).unwrap(), vec![4, 3]);
        assert!(broadcast_shapes("t", &[3], &[4]).is_err());
    }

    #[test]
    fn views() {
        let l = Layout::contiguous(&[2, 3]);
        let t = l.permute(&[1, 0]).unwrap();
        assert_eq!(t.strides, vec![1, 3]);
        assert!(!t.is_contiguous());
        assert_eq!(t.index_of(1), 3);
        let s = l.slice(1, 1, 3).unwrap();
        assert_eq!((s.offset, s.shape.clone()), (1, vec![2, 2]));
        let b = Layout::contiguous(&[2, 1]).broadcast_to(&[4, 2, 5]).unwrap();
        assert_eq!(b.strides, vec![0, 1, 0]);
        assert!(l.permute(&[0, 0]).is_err());
    }
}
