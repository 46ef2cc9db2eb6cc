// HorovodRsRaiseIfFailed: passes `values` through, or fails with TensorFlow's status `code` and
// `message` when `code` is not 0 (OK). A traced collective runs in a tf.py_function, and
// TensorFlow reports any exception of one as UnknownError (only ValueError, StopIteration and a
// few others keep a type), where Horovod's own ops fail with FailedPreconditionError and its
// kin: the function returns its error's code and message instead, and this op raises them.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;

constexpr int kFirstValue = 2;  // after `code` and `message`

REGISTER_OP("HorovodRsRaiseIfFailed")
    .Input("code: int32")
    .Input("message: string")
    .Input("values: T")
    .Output("passed: T")
    .Attr("T: list(type)")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      for (int i = kFirstValue; i < c->num_inputs(); ++i) c->set_output(i - kFirstValue, c->input(i));
      return absl::OkStatus();
    });

class RaiseIfFailed : public OpKernel {
 public:
  explicit RaiseIfFailed(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* c) override {
    const int code = c->input(0).scalar<int32_t>()();
    if (code != 0) {
      const auto& message = c->input(1).scalar<tensorflow::tstring>()();
      c->SetStatus(absl::Status(static_cast<absl::StatusCode>(code),
                                absl::string_view(message.data(), message.size())));
      return;
    }
    for (int i = kFirstValue; i < c->num_inputs(); ++i) c->set_output(i - kFirstValue, c->input(i));
  }
};

REGISTER_KERNEL_BUILDER(Name("HorovodRsRaiseIfFailed").Device(tensorflow::DEVICE_CPU), RaiseIfFailed);

}  // namespace
