/* optim_checks.c: the argument checks of the fused optimizer steps (shim_sgd, shim_adamw), made
 * once for both backends so a bad call fails alike on each, before any tensor memory is read. */
#include "internal.h"

enum { DESCRIPTION_CAP = 128 }; /* room for one shim_describe */

/* t (named what; NULL refused unless optional) has param's dtype and element count and is not param. */
static int check_like(const char *fn, const shim_tensor *param, const shim_tensor *t, const char *what, int optional) {
  if (t == NULL) return optional ? SHIM_OK : shim_fail(SHIM_E_INVALID, "%s: %s is null", fn, what);
  SHIM_TRY(shim_require_contiguous(fn, t, what));
  char bp[DESCRIPTION_CAP], bt[DESCRIPTION_CAP];
  if (t->dtype != param->dtype || t->numel != param->numel)
    return shim_fail(SHIM_E_INVALID, "%s: %s is %s but param is %s (same dtype and element count needed)", fn, what,
                     shim_describe(t, bt, sizeof bt), shim_describe(param, bp, sizeof bp));
  if (t != param && shim_tensors_overlap(t, param))
    return shim_fail(SHIM_E_INVALID, "%s: %s shares param's memory", fn, what);
  return SHIM_OK;
}

static int check_param(const char *fn, const shim_tensor *param, int32_t flags, int32_t allowed) {
  SHIM_REQUIRE_IN(fn, param, "param");
  SHIM_TRY(shim_require_contiguous(fn, param, "param"));
  if (param->dtype != SHIM_F32 && param->dtype != SHIM_F64)
    return shim_fail(SHIM_E_UNSUPPORTED, "%s: param is %s; the fused steps take f32 or f64 (keep f32 master weights)", fn,
                     shim_dtype_name(param->dtype));
  if ((flags & ~allowed) != 0) return shim_fail(SHIM_E_INVALID, "%s: unknown flags 0x%x", fn, (unsigned)(flags & ~allowed));
  return SHIM_OK;
}

int shim_check_sgd(const shim_tensor *param, const shim_tensor *grad, const shim_tensor *momentum_buf, double momentum,
                   int32_t flags) {
  const char *fn = "shim_sgd";
  SHIM_TRY(check_param(fn, param, flags, SHIM_OPTIM_NESTEROV | SHIM_OPTIM_MAXIMIZE | SHIM_OPTIM_FIRST));
  SHIM_TRY(check_like(fn, param, grad, "grad", 0));
  if (momentum_buf != NULL && shim_tensors_overlap(momentum_buf, grad))
    return shim_fail(SHIM_E_INVALID, "%s: grad and momentum_buf share memory", fn);
  if (momentum == 0 && (flags & SHIM_OPTIM_NESTEROV))
    return shim_fail(SHIM_E_INVALID, "%s: nesterov needs a nonzero momentum", fn);
  return check_like(fn, param, momentum_buf, "momentum_buf", momentum == 0);
}

int shim_check_adamw(const shim_tensor *param, const shim_tensor *grad, const shim_tensor *exp_avg,
                     const shim_tensor *exp_avg_sq, const shim_tensor *max_exp_avg_sq, int64_t step, int32_t flags) {
  const char *fn = "shim_adamw";
  SHIM_TRY(check_param(fn, param, flags, SHIM_OPTIM_MAXIMIZE | SHIM_OPTIM_AMSGRAD));
  SHIM_TRY(check_like(fn, param, grad, "grad", 0));
  SHIM_TRY(check_like(fn, param, exp_avg, "exp_avg", 0));
  SHIM_TRY(check_like(fn, param, exp_avg_sq, "exp_avg_sq", 0));
  SHIM_TRY(check_like(fn, param, max_exp_avg_sq, "max_exp_avg_sq", !(flags & SHIM_OPTIM_AMSGRAD)));
  /* The kernels read and write these as distinct arrays (restrict). */
  const shim_tensor *buffers[] = {exp_avg, exp_avg_sq, max_exp_avg_sq};
  const char *names[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  for (int i = 0; i < 3; i++)
    for (int j = i + 1; j < 3; j++)
      if (buffers[i] != NULL && buffers[j] != NULL && shim_tensors_overlap(buffers[i], buffers[j]))
        return shim_fail(SHIM_E_INVALID, "%s: %s and %s share memory", fn, names[i], names[j]);
  for (int i = 0; i < 3; i++)
    if (buffers[i] != NULL && shim_tensors_overlap(buffers[i], grad))
      return shim_fail(SHIM_E_INVALID, "%s: grad and %s share memory", fn, names[i]);
  if (step < 1) return shim_fail(SHIM_E_INVALID, "%s: step is %lld; the first step is 1", fn, (long long)step);
  return SHIM_OK;
}
