/* optim.c: the fused optimizer steps on the cpu (shim_sgd, shim_adamw): one pass over a
 * parameter, each element's update written as torch.optim's single-tensor loop (torch 1.13)
 * computes it op by op, so the results round alike: f32 in float with each scalar rounded to
 * float first (as torch's tensor-scalar ops round it), f64 in double. The CUDA kernels
 * (c/cuda/optim.cu) follow the same lines. */
#include <math.h>

#include "cpu.h"

/* SGD over n elements of T; the scalars are already T. */
#define SGD_LOOP(T)                                                                                     \
  for (int64_t i = 0; i < n; i++) {                                                                     \
    T d = maximize ? -g[i] : g[i];                                                                      \
    if (weight_decay != 0) d = d + weight_decay * p[i];                                                 \
    if (momentum != 0) {                                                                                \
      T m = first ? d : b[i] * momentum + damp * d;                                                     \
      b[i] = m;                                                                                         \
      d = nesterov ? d + momentum * m : m;                                                              \
    }                                                                                                   \
    p[i] = p[i] + neg_lr * d;                                                                           \
  }

static void sgd_f32(float *p, const float *g, float *b, float neg_lr, float momentum, float damp, float weight_decay,
                    int nesterov, int maximize, int first, int64_t n) {
  SGD_LOOP(float)
}

static void sgd_f64(double *p, const double *g, double *b, double neg_lr, double momentum, double damp,
                    double weight_decay, int nesterov, int maximize, int first, int64_t n) {
  SGD_LOOP(double)
}

int shim_sgd(shim_tensor *param, const shim_tensor *grad, shim_tensor *momentum_buf, double lr, double momentum,
             double dampening, double weight_decay, int32_t flags, shim_stream *s) {
  SHIM_TRY(shim_check_sgd(param, grad, momentum_buf, momentum, flags));
  int nesterov = (flags & SHIM_OPTIM_NESTEROV) != 0, maximize = (flags & SHIM_OPTIM_MAXIMIZE) != 0,
      first = (flags & SHIM_OPTIM_FIRST) != 0;
  void *b = momentum_buf != NULL ? shim_cpu_data(momentum_buf) : NULL;
  if (param->dtype == SHIM_F32)
    sgd_f32(shim_cpu_data(param), shim_cpu_data(grad), b, (float)-lr, (float)momentum, (float)(1 - dampening),
            (float)weight_decay, nesterov, maximize, first, param->numel);
  else
    sgd_f64(shim_cpu_data(param), shim_cpu_data(grad), b, -lr, momentum, 1 - dampening, weight_decay, nesterov, maximize,
            first, param->numel);
  return SHIM_OK;
}

/* AdamW over n elements of T (SQRT: its square root); the scalars are already T, and sign is -1
 * to maximize, else 1 (exact either way). AMS (a constant) keeps v_max, the running maximum. The
 * loops have no branches, so they vectorise (sqrt too: this file is built without errno). */
#define ADAMW_LOOP(T, SQRT, AMS)                                                                        \
  for (int64_t i = 0; i < n; i++) {                                                                     \
    T grad = sign * g[i];                                                                               \
    p[i] = p[i] * decay;                                                                                \
    m[i] = m[i] * beta1 + one_minus_beta1 * grad;                                                       \
    v[i] = v[i] * beta2 + one_minus_beta2 * grad * grad;                                                \
    T second = v[i];                                                                                    \
    if (AMS) {                                                                                          \
      T top = v_max[i];                                                                                 \
      second = (second > top || second != second) ? second : top; /* torch.maximum: NaN wins */         \
      v_max[i] = second;                                                                                \
    }                                                                                                   \
    T denom = SQRT(second) / bias2_sqrt + eps;                                                          \
    p[i] = p[i] + neg_step_size * m[i] / denom;                                                         \
  }

#define ADAMW_DEFINE(NAME, T, SQRT)                                                                     \
  static void NAME(T *restrict p, const T *restrict g, T *restrict m, T *restrict v, T *restrict v_max, \
                   T decay, T beta1, T one_minus_beta1, T beta2, T one_minus_beta2, T bias2_sqrt, T eps,    \
                   T neg_step_size, T sign, int64_t n) {                                                \
    if (v_max != NULL) {                                                                                \
      ADAMW_LOOP(T, SQRT, 1)                                                                            \
    } else {                                                                                            \
      ADAMW_LOOP(T, SQRT, 0)                                                                            \
    }                                                                                                   \
  }

ADAMW_DEFINE(adamw_f32, float, sqrtf)
ADAMW_DEFINE(adamw_f64, double, sqrt)

int shim_adamw(shim_tensor *param, const shim_tensor *grad, shim_tensor *exp_avg, shim_tensor *exp_avg_sq,
               shim_tensor *max_exp_avg_sq, double lr, double beta1, double beta2, double eps, double weight_decay,
               int64_t step, int32_t flags, shim_stream *s) {
  SHIM_TRY(shim_check_adamw(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, flags));
  double sign = (flags & SHIM_OPTIM_MAXIMIZE) ? -1 : 1;
  void *v_max = (flags & SHIM_OPTIM_AMSGRAD) ? shim_cpu_data(max_exp_avg_sq) : NULL;
  /* The scalars as torch's Python computes them, in double. */
  double decay = 1 - lr * weight_decay, step_size = lr / (1 - pow(beta1, (double)step));
  double bias2_sqrt = sqrt(1 - pow(beta2, (double)step));
  if (param->dtype == SHIM_F32)
    adamw_f32(shim_cpu_data(param), shim_cpu_data(grad), shim_cpu_data(exp_avg), shim_cpu_data(exp_avg_sq), v_max,
              (float)decay, (float)beta1, (float)(1 - beta1), (float)beta2, (float)(1 - beta2), (float)bias2_sqrt,
              (float)eps, (float)-step_size, (float)sign, param->numel);
  else
    adamw_f64(shim_cpu_data(param), shim_cpu_data(grad), shim_cpu_data(exp_avg), shim_cpu_data(exp_avg_sq), v_max,
              decay, beta1, 1 - beta1, beta2, 1 - beta2, bias2_sqrt, eps, -step_size, sign, param->numel);
  return SHIM_OK;
}
