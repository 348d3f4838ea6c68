/* kernels_seq_f32_wrap.h - double-in/double-out wrappers of the float32
 * sequence kernels (conv1d, GDN, attention), so that a float64 test can run
 * both precisions on the same inputs.  Each wrapper rounds its inputs to
 * float, calls the _f32 kernel and widens the outputs; NULL pointers pass
 * through as NULL.  Accumulating outputs (dw, dA_log, ddt_bias, attention
 * dq/dk/dv) accumulate onto the double values given. */
#ifndef LS_TEST_KERNELS_SEQ_F32_WRAP_H
#define LS_TEST_KERNELS_SEQ_F32_WRAP_H
#include <stddef.h>
#include <stdint.h>

void ks32_conv1d_forward(double *c, double *pre, double *tail_out, const double *m,
                         const double *tail_in, const double *w, size_t T, size_t C, size_t K);
void ks32_conv1d_backward(double *dm, double *dw, double *dtail_in, const double *dc,
                          const double *dtail_out, const double *pre, const double *m,
                          const double *tail_in, const double *w, size_t T, size_t C, size_t K);
void ks32_gdn_gates_forward(double *g, double *beta, const double *a, const double *b,
                            const double *A_log, const double *dt_bias, size_t T, size_t Hv);
void ks32_gdn_gates_backward(double *da, double *db, double *dA_log, double *ddt_bias,
                             const double *dg, const double *dbeta, const double *a,
                             const double *b, const double *A_log, const double *dt_bias,
                             size_t T, size_t Hv);
/* Which GDN form ks32_gdn_forward / ks32_gdn_backward call: 0 the entry
 * points (the default), 1 the token recurrence, 2 the chunked form. */
void ks32_gdn_use(int form);
void ks32_gdn_forward(double *o, double *S_out, const double *q, const double *k,
                      const double *v, const double *g, const double *beta, const double *S_in,
                      size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv);
void ks32_gdn_backward(double *dq, double *dk, double *dv, double *dg, double *dbeta,
                       double *dS_in, const double *do_, const double *dS_out, const double *q,
                       const double *k, const double *v, const double *g, const double *beta,
                       const double *S_in, size_t T, size_t Hk, size_t Hv, size_t dk_,
                       size_t dv_);
void ks32_attn_block_forward(double *o, double *lse, const double *q, const double *k,
                             const double *v, size_t Tq, size_t Tk, size_t H, size_t Hkv,
                             size_t hd, int64_t q_pos0, int64_t k_pos0, int causal, double tau);
void ks32_attn_block_backward(double *dq, double *dk, double *dv, const double *do_,
                              const double *q, const double *k, const double *v,
                              const double *o, const double *lse, size_t Tq, size_t Tk,
                              size_t H, size_t Hkv, size_t hd, int64_t q_pos0, int64_t k_pos0,
                              int causal, double tau);
void ks32_attn_merge_into(double *o, double *lse, const double *o_p, const double *lse_p,
                          size_t n, size_t hd);
void ks32_attn_merge_backward(double *do_p, double *dlse_p, const double *do_,
                              const double *dlse, const double *o_p, const double *lse_p,
                              const double *o, const double *lse, size_t n, size_t hd);
#endif
