// scaled_dot_product_attention (iOS18): softmax(Q K^T / sqrt(E)) V over broadcast batch dims.
// C06: the ANE ignores attn_mask. strict profiles reject a masked SDPA at compile (constraints.cpp);
// permissive ones run it without the mask and warn on every execute, as the hardware would.
#include <cmath>

#include "cpu/kernels/kernels.h"
#include "sim/ops/matmul.h"

namespace orion::sim::ops {

namespace {
struct SdpaGeom {
  MatmulGeom qk;  // scores [batch, L, S] = Q [.., L, E] x K^T
  MatmulGeom pv;  // out [batch, L, Ev] = P [batch, L, S] x V [.., S, Ev]
  int64_t L, S, E, Ev;
};

SdpaGeom sdpa_geometry(OpCtx& ctx) {
  const Value& q = ctx.expect_rank_ge("query", 2);
  const Value& k = ctx.expect_rank_ge("key", 2);
  const Value& v = ctx.expect_rank_ge("value", 2);
  ctx.expect_float("query");
  ctx.expect_same_dtype("query", "key");
  ctx.expect_same_dtype("query", "value");
  SdpaGeom g;
  g.L = q.shape[q.rank() - 2];
  g.E = q.shape[q.rank() - 1];
  g.S = k.shape[k.rank() - 2];
  g.Ev = v.shape[v.rank() - 1];
  if (v.shape[v.rank() - 2] != g.S)
    ctx.fail("key " + shape_str(k.shape) + " and value " + shape_str(v.shape) + " differ in sequence length");
  g.qk = matmul_geometry(ctx, "query", "key", false, true);
  // P has the broadcast batch of Q and K; V must broadcast against it.
  Shape pb = g.qk.batch, vb(v.shape.begin(), v.shape.end() - 2);
  Shape batch = ctx.broadcast(pb, vb, "query/key", "value");
  if (batch != pb) ctx.fail("value " + shape_str(v.shape) + " widens the batch of query/key " + shape_str(pb));
  g.pv.batch = batch;
  g.pv.M = g.L;
  g.pv.N = g.Ev;
  g.pv.K = g.S;
  g.pv.gs.M = g.L;
  g.pv.gs.N = g.Ev;
  g.pv.gs.K = g.S;
  g.pv.gs.lda = g.S;
  g.pv.gs.ldb = g.Ev;
  g.pv.gs.ldc = g.Ev;
  g.pv.y_off = batch_offsets(vb, batch, g.S * g.Ev);
  g.pv.out = batch;
  g.pv.out.push_back(g.L);
  g.pv.out.push_back(g.Ev);
  if (ctx.has("attn_mask")) {
    const Value& m = ctx.v("attn_mask");
    if (m.dtype != DType::bool_ && m.dtype != q.dtype) ctx.fail("attn_mask must be bool or the dtype of query");
    Shape ms = batch;
    ms.push_back(g.L);
    ms.push_back(g.S);
    Shape b = ctx.broadcast(m.shape, ms, "attn_mask", "scores");
    if (b != ms) ctx.fail("attn_mask " + shape_str(m.shape) + " does not broadcast to the scores " + shape_str(ms));
  }
  return g;
}
}  // namespace

void sdpa_infer(OpCtx& ctx) {
  SdpaGeom g = sdpa_geometry(ctx);
  ctx.out_dtype = ctx.v("query").dtype;
  ctx.out_shape = g.pv.out;
}

RunFn sdpa_lower(OpCtx& ctx) {
  const SdpaGeom g = sdpa_geometry(ctx);
  int iq = ctx.input("query"), ik = ctx.input("key"), iv = ctx.input("value");
  bool masked = ctx.has("attn_mask");  // never read: C06
  const int64_t nb = (int64_t)g.qk.x_off.size(), LS = g.L * g.S;
  const float scale = 1.0f / std::sqrt((float)g.E);
  ctx.scratch_bytes = nb * LS * (int64_t)(sizeof(float) + 2 * sizeof(f16));
  ctx.flops = 2.0 * nb * LS * (g.E + g.Ev) + 5.0 * nb * LS;
  ctx.unit = OpCtx::Unit::matmul;
  std::string name = ctx.st.out;
  // Dead-column skipping: a prefix of the query axis reads those query rows and every key/value
  // (attention mixes along the key axis only); a prefix of the value columns reads those of value.
  const int ro = (int)g.pv.out.size(), rq = ctx.v("query").rank(), rv = ctx.v("value").rank();
  const int qid = ctx.vid("query"), vid = ctx.vid("value");
  ctx.column_rule = [=](int axis, int64_t len, std::vector<std::pair<int, Region>>* in, std::string* why) {
    if (axis == ro - 2) {
      in->push_back({qid, Region::prefix(rq - 2, len)});
      return true;
    }
    if (axis == ro - 1) {
      in->push_back({vid, Region::prefix(rv - 1, len)});
      return true;
    }
    *why = "scaled_dot_product_attention '" + name + "': no column rule for its batch axis " + std::to_string(axis);
    return false;
  };
  auto run = [=](const RunArgs& a, int64_t rows) {  // the first `rows` queries of every batch
    float* sc = (float*)a.scratch;
    f16* s16 = (f16*)(sc + nb * LS);
    f16* p16 = s16 + nb * LS;
    const f16* q = a.at<f16>(iq);
    const f16* k = a.at<f16>(ik);
    const f16* v = a.at<f16>(iv);
    std::vector<const f16*> A(nb), B(nb);
    std::vector<float*> C(nb);
    std::vector<f16*> C16(nb);
    for (int64_t b = 0; b < nb; ++b) {
      A[b] = q + g.qk.x_off[b];
      B[b] = k + g.qk.y_off[b];
      C[b] = sc + b * LS;
    }
    cpu::kernels::GemmShape qk = g.qk.gs, pv = g.pv.gs;
    qk.M = pv.M = rows;
    cpu::kernels::gemm_f16_f32out(qk, nb, A.data(), B.data(), C.data());
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t i = b * LS; i < b * LS + rows * g.S; ++i) s16[i] = f32_to_f16(sc[i] * scale);  // fp16 scores (C37)
      if (rows < g.L) cpu::kernels::softmax(s16 + b * LS, p16 + b * LS, rows, g.S, 1);
    }
    if (rows == g.L) cpu::kernels::softmax(s16, p16, nb * g.L, g.S, 1);
    for (int64_t b = 0; b < nb; ++b) {
      A[b] = p16 + b * LS;
      B[b] = v + g.pv.y_off[b];
      C16[b] = a.o<f16>() + b * g.L * g.Ev;
    }
    cpu::kernels::gemm_f16(pv, nb, A.data(), B.data(), C16.data());
    if (masked && a.warn) a.warn->warn("C06", "scaled_dot_product_attention '" + name + "': attn_mask ignored, as on the ANE");
  };
  ctx.run_prefix = [=](const RunArgs& a, int axis, int64_t len) { run(a, axis == ro - 2 ? len : g.L); };
  return [=](const RunArgs& a) { run(a, g.L); };
}

}  // namespace orion::sim::ops
