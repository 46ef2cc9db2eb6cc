//! A dense layer's bias add as one op: `y[i, j] = x[i, j] + b[j]`.
//!
//! candle's `broadcast_add` differentiates to a `sum_keepdim` over the
//! batch, which its CPU backend reduces element by element through strided
//! indices: a fifth of an MLP's step. Here the bias gradient is the rows of
//! the output gradient added one after another into a vector, a loop the
//! compiler vectorizes.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};

/// `x + b` for `x` of shape `(rows, width)` and `b` of shape `(width,)`.
pub(crate) fn add_bias(x: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    x.apply_op2(b, BiasAdd)
}

struct BiasAdd;

impl CustomOp2 for BiasAdd {
    fn name(&self) -> &'static str {
        "bias-add"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_layout: &Layout,
        b: &CpuStorage,
        b_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, b) = (f32_slice(x, x_layout)?, f32_slice(b, b_layout)?);
        let width = b.len();
        check_shape(x_layout.shape(), width)?;
        let mut y = x.to_vec();
        for row in y.chunks_exact_mut(width) {
            for (value, bias) in row.iter_mut().zip(b) {
                *value += bias;
            }
        }
        Ok((CpuStorage::F32(y), x_layout.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        _b: &Tensor,
        _y: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        Ok((
            Some(grad.clone()),
            Some(grad.apply_op1_no_bwd(&ColumnSums)?),
        ))
    }
}

/// The sums of a `(rows, width)` matrix's columns, `(width,)`.
struct ColumnSums;

impl CustomOp1 for ColumnSums {
    fn name(&self) -> &'static str {
        "column-sums"
    }

    fn cpu_fwd(&self, m: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let m = f32_slice(m, layout)?;
        let dims = layout.shape().dims();
        let width = dims.last().copied().unwrap_or(1);
        check_shape(layout.shape(), width)?;
        let mut sums = vec![0f32; width];
        for row in m.chunks_exact(width) {
            for (sum, value) in sums.iter_mut().zip(row) {
                *sum += value;
            }
        }
        Ok((CpuStorage::F32(sums), Shape::from(width)))
    }
}

/// The f32 values of a contiguous tensor's storage.
fn f32_slice<'a>(storage: &'a CpuStorage, layout: &Layout) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(values) = storage else {
        candle_core::bail!("bias-add takes f32 tensors, got {:?}", storage.dtype())
    };
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&values[start..end]),
        None => candle_core::bail!("bias-add takes contiguous tensors"),
    }
}

fn check_shape(shape: &Shape, width: usize) -> candle_core::Result<()> {
    match shape.dims() {
        [_, w] if *w == width => Ok(()),
        dims => candle_core::bail!("bias-add of a bias of {width} to a tensor of shape {dims:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn values_and_gradients_equal_broadcast_adds() {
        let device = Device::Cpu;
        let x = Var::from_vec(
            (0..12).map(|v| v as f32 * 0.5 - 2.0).collect(),
            (4, 3),
            &device,
        )
        .unwrap();
        let b = Var::from_vec(vec![0.25f32, -1.0, 3.0], 3, &device).unwrap();
        let weights =
            Tensor::from_vec((0..12).map(|v| v as f32).collect(), (4, 3), &device).unwrap();
        let ours = add_bias(x.as_tensor(), b.as_tensor()).unwrap();
        let theirs = x.as_tensor().broadcast_add(b.as_tensor()).unwrap();
        assert_eq!(
            ours.to_vec2::<f32>().unwrap(),
            theirs.to_vec2::<f32>().unwrap()
        );
        let grads = |y: &Tensor| {
            let grads = (y * &weights)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            (
                grads.get(x.as_tensor()).unwrap().to_vec2::<f32>().unwrap(),
                grads.get(b.as_tensor()).unwrap().to_vec1::<f32>().unwrap(),
            )
        };
        assert_eq!(grads(&ours), grads(&theirs));
    }
}
