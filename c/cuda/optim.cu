/* optim.cu: the fused optimizer steps on the device (shim_sgd, shim_adamw), a grid-stride pass
 * per parameter. Each element's update is the cpu's (c/cpu/optim.c), op for op: the
 * arithmetic goes through the round-to-nearest intrinsics, so nvcc contracts nothing into a
 * fused multiply-add and both backends give the same bits; the scalars are computed on the
 * host in double, as torch's Python computes them, then rounded to the compute type. */
#include "elements.h"

using namespace shim;

namespace {

/* One IEEE operation each, rounded to nearest, never contracted. */
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float root(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ double root(double a) { return __dsqrt_rn(a); }

template <typename T>
struct SgdArgs {
  T neg_lr, momentum, damp, weight_decay;
  bool nesterov, maximize, first;
};

template <typename T>
__global__ void sgd_kernel(T *p, const T *g, T *b, SgdArgs<T> a, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    T d = a.maximize ? -g[i] : g[i];
    if (a.weight_decay != (T)0) d = add(d, mul(a.weight_decay, p[i]));
    if (a.momentum != (T)0) {
      T m = a.first ? d : add(mul(b[i], a.momentum), mul(a.damp, d));
      b[i] = m;
      d = a.nesterov ? add(d, mul(a.momentum, m)) : m;
    }
    p[i] = add(p[i], mul(a.neg_lr, d));
  }
}

template <typename T>
struct AdamwArgs {
  T decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bias2_sqrt, eps, neg_step_size;
  bool maximize;
};

template <typename T>
__global__ void adamw_kernel(T *p, const T *g, T *m, T *v, T *v_max, AdamwArgs<T> a, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    T grad = a.maximize ? -g[i] : g[i];
    T param = mul(p[i], a.decay);
    T mi = add(mul(m[i], a.beta1), mul(a.one_minus_beta1, grad));
    T vi = add(mul(v[i], a.beta2), mul(mul(a.one_minus_beta2, grad), grad));
    m[i] = mi;
    v[i] = vi;
    T second = vi;
    if (v_max != nullptr) {
      T top = v_max[i];
      second = (second > top || second != second) ? second : top; /* torch.maximum: NaN wins */
      v_max[i] = second;
    }
    T denom = add(div(root(second), a.bias2_sqrt), a.eps);
    p[i] = add(param, div(mul(a.neg_step_size, mi), denom));
  }
}

template <typename T>
T *data_of(const shim_tensor *t) {
  return t != nullptr ? (T *)shim_cuda_data(t) : nullptr;
}

}  // namespace

int shim_sgd(shim_tensor *param, const shim_tensor *grad, shim_tensor *momentum_buf, double lr, double momentum,
             double dampening, double weight_decay, int32_t flags, shim_stream *s) {
  SHIM_TRY(shim_check_sgd(param, grad, momentum_buf, momentum, flags));
  int64_t n = param->numel;
  if (n == 0) return SHIM_OK;
  shim_cuda_track(s, param);
  shim_cuda_track(s, grad);
  shim_cuda_track(s, momentum_buf);
  bool nesterov = (flags & SHIM_OPTIM_NESTEROV) != 0, maximize = (flags & SHIM_OPTIM_MAXIMIZE) != 0,
       first = (flags & SHIM_OPTIM_FIRST) != 0;
  cudaStream_t stream = shim_cuda_stream(s);
  unsigned blocks = shim_cuda_blocks(n);
  if (param->dtype == SHIM_F32) {
    SgdArgs<float> a{(float)-lr, (float)momentum, (float)(1 - dampening), (float)weight_decay, nesterov, maximize, first};
    sgd_kernel<float><<<blocks, SHIM_CUDA_THREADS, 0, stream>>>(data_of<float>(param), data_of<float>(grad),
                                                              data_of<float>(momentum_buf), a, n);
  } else {
    SgdArgs<double> a{-lr, momentum, 1 - dampening, weight_decay, nesterov, maximize, first};
    sgd_kernel<double><<<blocks, SHIM_CUDA_THREADS, 0, stream>>>(data_of<double>(param), data_of<double>(grad),
                                                               data_of<double>(momentum_buf), a, n);
  }
  CUDA_CHECK_LAUNCH("sgd_kernel");
  return SHIM_OK;
}

int shim_adamw(shim_tensor *param, const shim_tensor *grad, shim_tensor *exp_avg, shim_tensor *exp_avg_sq,
               shim_tensor *max_exp_avg_sq, double lr, double beta1, double beta2, double eps, double weight_decay,
               int64_t step, int32_t flags, shim_stream *s) {
  SHIM_TRY(shim_check_adamw(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, flags));
  int64_t n = param->numel;
  if (n == 0) return SHIM_OK;
  const shim_tensor *v_max = (flags & SHIM_OPTIM_AMSGRAD) ? max_exp_avg_sq : nullptr;
  shim_cuda_track(s, param);
  shim_cuda_track(s, grad);
  shim_cuda_track(s, exp_avg);
  shim_cuda_track(s, exp_avg_sq);
  shim_cuda_track(s, v_max);
  bool maximize = (flags & SHIM_OPTIM_MAXIMIZE) != 0;
  double decay = 1 - lr * weight_decay, step_size = lr / (1 - pow(beta1, (double)step));
  double bias2_sqrt = sqrt(1 - pow(beta2, (double)step));
  cudaStream_t stream = shim_cuda_stream(s);
  unsigned blocks = shim_cuda_blocks(n);
  if (param->dtype == SHIM_F32) {
    AdamwArgs<float> a{(float)decay, (float)beta1, (float)(1 - beta1), (float)beta2, (float)(1 - beta2),
                       (float)bias2_sqrt, (float)eps, (float)-step_size, maximize};
    adamw_kernel<float><<<blocks, SHIM_CUDA_THREADS, 0, stream>>>(data_of<float>(param), data_of<float>(grad),
                                                                data_of<float>(exp_avg), data_of<float>(exp_avg_sq),
                                                                data_of<float>(v_max), a, n);
  } else {
    AdamwArgs<double> a{decay, beta1, 1 - beta1, beta2, 1 - beta2, bias2_sqrt, eps, -step_size, maximize};
    adamw_kernel<double><<<blocks, SHIM_CUDA_THREADS, 0, stream>>>(data_of<double>(param), data_of<double>(grad),
                                                                 data_of<double>(exp_avg), data_of<double>(exp_avg_sq),
                                                                 data_of<double>(v_max), a, n);
  }
  CUDA_CHECK_LAUNCH("adamw_kernel");
  return SHIM_OK;
}
