// What the CPU backend's ops share: oneDNN memory descriptors for dlbench's shapes, a parameter
// kept in its canonical layout and handed to a kernel in the format it asks for, and one layer's
// three matrix products (a 1×1 convolution's and a linear layer's).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>
#include <oneapi/dnnl/dnnl_debug.h>

#include "cpu/cpu_backend.hpp"
#include "cpu/dnnl_check.hpp"
#include "cpu/onednn_memory.hpp"

namespace dlbench::worker::cpu_ops {

using dnnl::memory;
using tag = dnnl::memory::format_tag;

inline memory::desc md_of(const Shape& shape, Layout layout, DType dtype = DType::fp32) {
  tag t = tag::undef;
  switch (shape.rank) {
    case 1: t = tag::a; break;
    case 2: t = tag::ab; break;
    case 4: t = layout == Layout::nhwc ? tag::nhwc : tag::nchw; break;  // plain 4-D is OIHW = nchw order
    default: throw std::invalid_argument("cpu backend: unsupported tensor rank " + std::to_string(shape.rank));
  }
  return memory::desc(dims_of(shape), dnnl_type(dtype), t);
}

inline memory::desc any_md(const Shape& shape, DType dtype = DType::fp32) {
  return memory::desc(dims_of(shape), dnnl_type(dtype), tag::any);
}

// `attr` with oneDNN's scratchpad in the caller's hands: every primitive descriptor the backend
// makes takes this, and its primitive runs as a Primitive below.
inline dnnl::primitive_attr user_scratchpad(dnnl::primitive_attr attr = {}) {
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// A oneDNN primitive that runs on the backend's stream with the backend's scratchpad
// (CpuBackend::reserve_primitive_scratchpad), which it reserves when it is made. Its descriptor
// must have been made with user_scratchpad(): in oneDNN's own mode the primitive would allocate
// the scratchpad itself, unseen by the host memory check, so such a descriptor is refused here.
class Primitive {
 public:
  Primitive() = default;
  template <typename PrimitiveDesc>
  Primitive(CpuBackend& backend, const PrimitiveDesc& pd) : backend_(&backend), scratchpad_(pd.scratchpad_desc()) {
    if (pd.get_primitive_attr().get_scratchpad_mode() != dnnl::scratchpad_mode::user) {
      throw std::logic_error(std::string("cpu backend: a oneDNN ") +
                             dnnl_prim_kind2str(static_cast<dnnl_primitive_kind_t>(pd.get_kind())) + " primitive (" +
                             pd.impl_info_str() + ") made without user_scratchpad() would allocate its scratchpad itself");
    }
    primitive_ = DLBENCH_DNNL_CALL(dnnl::primitive(pd.get()));
    backend.reserve_primitive_scratchpad(scratchpad_.get_size());
  }

  void execute(std::unordered_map<int, memory> args) const {
    if (scratchpad_.get_size() > 0) {
      args[DNNL_ARG_SCRATCHPAD] = mem(scratchpad_, backend_->engine(), backend_->primitive_scratchpad());
    }
    primitive_.execute(backend_->stream(), args);
  }
  // A reorder's call.
  void execute(const memory& from, const memory& to) const { execute({{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}); }

 private:
  CpuBackend* backend_ = nullptr;
  memory::desc scratchpad_;
  dnnl::primitive primitive_;
};

// A reorder from `from` to `to` as a Primitive.
inline Primitive reorder(CpuBackend& backend, const memory::desc& from, const memory::desc& to) {
  const auto& engine = backend.engine();
  return Primitive(backend, DLBENCH_DNNL_CALL(dnnl::reorder::primitive_desc(engine, from, engine, to, user_scratchpad())));
}

// Keeps a parameter in its canonical layout and gives a kernel the format it asked for:
// reorders user → kernel before use (weights) or kernel → user after (weight gradients).
// The kernel-format copy lives only during one call, so every layer uses the backend's one
// scratch buffer instead of keeping copies of its own (the model's weights, up to three times).
class WeightFormat {
 public:
  WeightFormat(CpuBackend& backend, const memory::desc& user, const memory::desc& kernel)
      : backend_(backend), user_(user), kernel_(kernel), needed_(user != kernel) {
    if (!needed_) return;
    backend_.reserve_weight_scratch(kernel.get_size());
    to_kernel_ = reorder(backend, user, kernel);
    to_user_ = reorder(backend, kernel, user);
  }

  // A kernel-format view of user-format weights, valid until the next use of the scratch.
  memory in(const void* user_data) {
    if (!needed_) return mem(user_, backend_.engine(), user_data);
    memory kernel = mem(kernel_, backend_.engine(), backend_.weight_scratch());
    to_kernel_.execute(mem(user_, backend_.engine(), user_data), kernel);
    return kernel;
  }
  // Where a kernel writes gradients; finish() moves them to user format.
  memory out(void* user_data) {
    return needed_ ? mem(kernel_, backend_.engine(), backend_.weight_scratch()) : mem(user_, backend_.engine(), user_data);
  }
  void finish(void* user_data) {
    if (!needed_) return;
    to_user_.execute(mem(kernel_, backend_.engine(), backend_.weight_scratch()), mem(user_, backend_.engine(), user_data));
  }

 private:
  CpuBackend& backend_;
  memory::desc user_;
  memory::desc kernel_;
  bool needed_;
  Primitive to_kernel_;
  Primitive to_user_;
};


// One layer's three matrix products on row-major data: y = x · wᵀ (+ bias), dx = dy · w and
// dw = dyᵀ · x, w in the parameters' [out, in] layout (the fp32 master, reordered to the kernels'
// dtype and format each call) and dw accumulated and written straight into it in fp32.
class MatmulPasses {
 public:
  enum class Weights {
    kernel_format,  // the fp32 weights reordered into each product's own format, each call
    plain,          // their own plain layout: as they are in fp32, converted to `dtype` each call (linear_weights.hpp)
    none,           // just dw = dyᵀ · x (a layer whose other two passes run elsewhere)
  };
  MatmulPasses(CpuBackend& backend, std::int64_t rows, std::int64_t in, std::int64_t out, DType dtype, bool bias,
               Weights weights = Weights::kernel_format)
      : b_(backend) {
    const auto& engine = backend.engine();
    const auto data = dnnl_type(dtype), f32 = memory::data_type::f32;
    x_ = memory::desc({rows, in}, data, tag::ab);
    y_ = memory::desc({rows, out}, data, tag::ab);
    dy_transposed_ = memory::desc({out, rows}, data, tag::ba);
    dw_ = memory::desc({out, in}, f32, tag::ab);
    if (bias) bias_ = memory::desc({1, out}, f32, tag::ab);
    // dw = dyᵀ · x, accumulated and written in fp32.
    bwd_weights_ = Primitive(backend, DLBENCH_DNNL_CALL(dnnl::matmul::primitive_desc(
                                          dnnl::matmul::desc(dy_transposed_, x_, dw_), user_scratchpad(), engine)));
    if (weights == Weights::none) return;
    // y = x · wᵀ: the OI parameter read as an [in, out] matrix is its transpose, 'ba'; dx = dy · w.
    // Plain weights are those very layouts; otherwise each product picks its own.
    const bool plain = weights == Weights::plain;
    const memory::desc w_transposed({in, out}, data, plain ? tag::ba : tag::any);
    const memory::desc w({out, in}, data, plain ? tag::ab : tag::any);
    const auto fwd_pd = DLBENCH_DNNL_CALL(
        dnnl::matmul::primitive_desc(dnnl::matmul::desc(x_, w_transposed, bias_, y_), user_scratchpad(), engine));
    const auto bwd_data_pd =
        DLBENCH_DNNL_CALL(dnnl::matmul::primitive_desc(dnnl::matmul::desc(y_, w, x_), user_scratchpad(), engine));
    fwd_ = Primitive(backend, fwd_pd);
    bwd_data_ = Primitive(backend, bwd_data_pd);
    if (plain) {
      // One conversion serves both products: the forward reads its result as [in, out], 'ba'.
      fwd_transposed_ = fwd_pd.weights_desc();
      bwd_data_weights_.emplace(backend, memory::desc({out, in}, f32, tag::ab), bwd_data_pd.weights_desc());
      return;
    }
    fwd_weights_.emplace(backend, memory::desc({in, out}, f32, tag::ba), fwd_pd.weights_desc());
    bwd_data_weights_.emplace(backend, memory::desc({out, in}, f32, tag::ab), bwd_data_pd.weights_desc());
  }

  void forward(const void* x, const float* weight, const float* bias, void* y) {
    const memory weights = fwd_weights_ ? fwd_weights_->in(weight)
                                        : mem(fwd_transposed_, b_.engine(), bwd_data_weights_->in(weight).get_data_handle());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(x_, b_.engine(), x)},
                                         {DNNL_ARG_WEIGHTS, weights},
                                         {DNNL_ARG_DST, mem(y_, b_.engine(), y)}};
    if (bias != nullptr) args[DNNL_ARG_BIAS] = mem(bias_, b_.engine(), bias);
    fwd_.execute(std::move(args));
  }
  void backward_data(const void* dy, const float* weight, void* dx) {
    bwd_data_.execute({{DNNL_ARG_SRC, mem(y_, b_.engine(), dy)},
                       {DNNL_ARG_WEIGHTS, bwd_data_weights_->in(weight)},
                       {DNNL_ARG_DST, mem(x_, b_.engine(), dx)}});
  }
  void backward_weights(const void* x, const void* dy, float* dweight) {
    bwd_weights_.execute({{DNNL_ARG_SRC, mem(dy_transposed_, b_.engine(), dy)},
                          {DNNL_ARG_WEIGHTS, mem(x_, b_.engine(), x)},
                          {DNNL_ARG_DST, mem(dw_, b_.engine(), dweight)}});
  }

 private:
  CpuBackend& b_;
  memory::desc x_, y_, dy_transposed_, dw_, bias_;
  memory::desc fwd_transposed_;  // plain weights: the converted [out, in] matrix read as [in, out]
  Primitive fwd_, bwd_data_, bwd_weights_;
  std::optional<WeightFormat> fwd_weights_, bwd_data_weights_;
};


}  // namespace dlbench::worker::cpu_ops
