// problem.cpp — deterministic test-problem generation (see problem.hpp).
#include "check/problem.hpp"

#include <algorithm>
#include <cmath>

namespace mc::check {

double SplitMix64::normal() {
  // Box–Muller, cosine branch; u1 in (0, 1] so log(u1) is finite.
  const double u1 = 1.0 - uniform();
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

SplitMix64 stream(uint64_t seed, Stream s, uint64_t salt) {
  // Decorrelate the sub-streams by hashing (seed, stream, salt) through one
  // splitmix64 step each.
  SplitMix64 h(seed);
  uint64_t k = h.next() ^ (uint64_t(s) * 0xd1b54a32d192ed03ULL);
  SplitMix64 h2(k + salt * 0x8cb92ba72f3d8dd7ULL);
  return SplitMix64(h2.next());
}

void fill_normal(SplitMix64& rng, std::vector<double>& v, double scale) {
  for (double& x : v) x = f32_exact(scale * rng.normal());
}

Problem::Problem(const ModelConfig& c, int64_t B_, int64_t T_, uint64_t seed_)
    : cfg(c), dims(Dims::from(c)), layout(dims), B(B_), T(T_), seed(seed_) {
  validate_runtime(dims, B, T);
}

namespace {

void perturb_params(const ParamLayout& lay, SplitMix64& rng, std::vector<double>& p,
                    bool softplus_identity, uint64_t seed) {
  auto each = [&](int64_t off, int64_t n, auto fn) {
    for (int64_t i = 0; i < n; ++i) p[size_t(off + i)] = f32_exact(fn(p[size_t(off + i)]));
  };
  const Dims& d = lay.dims;
  each(lay.input_proj_b, d.dm, [&](double) { return rng.uniform(-0.5, 0.5); });
  for (const LayerParamOffsets& o : lay.layers) {
    each(o.norm_w, d.dm, [&](double) { return 1.0 + rng.uniform(-0.3, 0.3); });
    each(o.conv_b, d.di, [&](double) { return rng.uniform(-0.5, 0.5); });
    each(o.dt_proj_b, d.di, [&](double v) { return v + rng.uniform(-0.5, 2.0); });
    each(o.a_log, d.di * d.ds, [&](double v) { return v + rng.uniform(-0.3, 0.3); });
    each(o.d_param, d.di, [&](double) { return 1.0 + rng.uniform(-0.5, 0.5); });
  }
  if (softplus_identity) {
    for (size_t l = 0; l < lay.layers.size(); ++l) {
      SplitMix64 r = stream(seed, Stream::SoftplusIdentity, 1000 + l);
      for (int64_t c : softplus_identity_channels(d, seed, int64_t(l)))
        p[size_t(lay.layers[l].dt_proj_b + c)] = f32_exact(kIdentityBias + r.uniform());
    }
  }
  each(lay.norm_f_w, d.dm, [&](double) { return 1.0 + rng.uniform(-0.3, 0.3); });
}

}  // namespace

std::vector<int64_t> softplus_identity_channels(const Dims& d, uint64_t seed, int64_t layer) {
  const int64_t n = std::max<int64_t>(1, d.di / 8);
  // Partial Fisher–Yates over the channel indices, then sorted.
  std::vector<int64_t> idx(size_t(d.di));
  for (int64_t i = 0; i < d.di; ++i) idx[size_t(i)] = i;
  SplitMix64 r = stream(seed, Stream::SoftplusIdentity, uint64_t(layer));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = i + int64_t(r.next() % uint64_t(d.di - i));
    std::swap(idx[size_t(i)], idx[size_t(j)]);
  }
  std::vector<int64_t> out(idx.begin(), idx.begin() + n);
  std::sort(out.begin(), out.end());
  return out;
}

Problem make_problem(const ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed,
                     const ProblemOptions& opt) {
  Problem pr(cfg, B, T, seed);
  const Dims& d = pr.dims;
  const std::vector<float> init = init_params(pr.layout, seed);
  pr.params.assign(init.begin(), init.end());
  SplitMix64 rp = stream(seed, Stream::Params);
  perturb_params(pr.layout, rp, pr.params, opt.softplus_identity, seed);

  pr.X.resize(size_t(B * T * d.mid));
  SplitMix64 rx = stream(seed, Stream::Input);
  fill_normal(rx, pr.X, opt.x_scale);

  pr.conv0.assign(size_t(d.L * B * d.di * d.dc), 0.0);
  pr.ssm0.assign(size_t(d.L * B * d.di * d.ds), 0.0);
  if (!opt.zero_state) {
    SplitMix64 rc = stream(seed, Stream::ConvState);
    fill_normal(rc, pr.conv0, opt.state_scale);
    SplitMix64 rs = stream(seed, Stream::SsmState);
    fill_normal(rs, pr.ssm0, opt.state_scale);
  }
  pr.d_out.resize(size_t(B * T * d.dm));
  SplitMix64 rd = stream(seed, Stream::DOut);
  fill_normal(rd, pr.d_out, 1.0);
  pr.d_conv_final.assign(pr.conv0.size(), 0.0);
  pr.d_ssm_final.assign(pr.ssm0.size(), 0.0);
  if (opt.final_state_grads) {
    SplitMix64 rf = stream(seed, Stream::FinalStateGrads);
    fill_normal(rf, pr.d_conv_final, opt.final_grad_scale);
    fill_normal(rf, pr.d_ssm_final, opt.final_grad_scale);
  }
  return pr;
}

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }
std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

}  // namespace mc::check
