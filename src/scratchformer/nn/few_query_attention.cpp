// scratchformer::few_query_attention: softmax(q k^T * scale) v for a few queries a row, in
// float32, over keys and values that may be a slice of a cache (any strides but the last).
//
// q (batch, heads, queries, d); k, v (batch, kv_heads, keys, d), each kv head shared by
// heads / kv_heads consecutive query heads (grouped-query attention); mask (batch, heads,
// queries, keys), True where a query may attend (broadcast views: strides of 0). A query
// with no key allowed gets zeros. Each (row, head) is one task of ATen's parallel_for: its
// scores are dot products of the query with each allowed key, then a softmax (the largest
// score taken off, exp by ATen's vectors), then the weighted sum of the values, so the
// keys and values are read once per query, in order. A decoding step has one query a row,
// where PyTorch's flash kernel, which splits its work by blocks of queries, does worst.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;
constexpr float kNoScore = -std::numeric_limits<float>::infinity();

float dot(const float* a, const float* b, int64_t d) {
  Vec sums[2] = {Vec(0.0f), Vec(0.0f)};  // two chains of products in flight
  int64_t i = 0;
  for (; i + 2 * Vec::size() <= d; i += 2 * Vec::size())
    for (int half = 0; half < 2; ++half) {
      const int64_t at = i + half * Vec::size();
      sums[half] = at::vec::fmadd(Vec::loadu(a + at), Vec::loadu(b + at), sums[half]);
    }
  float total = at::vec::vec_reduce_all<float>([](Vec& x, Vec& y) { return x + y; }, sums[0] + sums[1]);
  for (; i < d; ++i) total += a[i] * b[i];
  return total;
}

// out += weight * value, over d features.
void accumulate(float* out, const float* value, float weight, int64_t d) {
  int64_t i = 0;
  for (; i + Vec::size() <= d; i += Vec::size())
    at::vec::fmadd(Vec(weight), Vec::loadu(value + i), Vec::loadu(out + i)).store(out + i);
  for (; i < d; ++i) out[i] += weight * value[i];
}

at::Tensor few_query_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& mask, double scale) {
  for (const at::Tensor* t : {&q, &k, &v}) {
    TORCH_CHECK(t->dim() == 4 && t->scalar_type() == at::kFloat && t->device().is_cpu(),
                "few_query_attention: q, k and v must be float32 (batch, heads, length, d) on the CPU");
    TORCH_CHECK(t->size(3) <= 1 || t->stride(3) == 1, "few_query_attention: the last dimension must be contiguous");
  }
  const int64_t batch = q.size(0), heads = q.size(1), queries = q.size(2), d = q.size(3);
  const int64_t kv_heads = k.size(1), keys = k.size(2), d_v = v.size(3);
  TORCH_CHECK(k.size(0) == batch && v.size(0) == batch && v.size(1) == kv_heads && v.size(2) == keys &&
                  k.size(3) == d && kv_heads > 0 && heads % kv_heads == 0,
              "few_query_attention: k and v must be (batch, kv_heads, keys, d) with kv_heads dividing heads");
  TORCH_CHECK(mask.scalar_type() == at::kBool && mask.sizes() == at::IntArrayRef({batch, heads, queries, keys}),
              "few_query_attention: mask must be bool (batch, heads, queries, keys)");
  at::Tensor out = at::empty({batch, heads, queries, d_v}, q.options());
  const float* q_data = q.data_ptr<float>();
  const float* k_data = k.data_ptr<float>();
  const float* v_data = v.data_ptr<float>();
  const bool* mask_data = mask.data_ptr<bool>();
  float* out_data = out.data_ptr<float>();
  const auto qs = q.strides(), ks = k.strides(), vs = v.strides(), ms = mask.strides();
  const int64_t group = heads / kv_heads;
  at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(keys);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / heads, h = task % heads, g = h / group;
      const float* key = k_data + b * ks[0] + g * ks[1];
      const float* value = v_data + b * vs[0] + g * vs[1];
      for (int64_t i = 0; i < queries; ++i) {
        const float* query = q_data + b * qs[0] + h * qs[1] + i * qs[2];
        const bool* allowed = mask_data + b * ms[0] + h * ms[1] + i * ms[2];
        float* o = out_data + ((b * heads + h) * queries + i) * d_v;
        std::fill(o, o + d_v, 0.0f);
        float most = kNoScore;
        for (int64_t j = 0; j < keys; ++j) {
          scores[j] = allowed[j * ms[3]] ? dot(query, key + j * ks[2], d) * float(scale) : kNoScore;
          most = std::max(most, scores[j]);
        }
        if (most == kNoScore) continue;  // no key allowed: zeros
        at::vec::map([most](Vec x) { return (x - Vec(most)).exp(); }, scores.data(), scores.data(), keys);
        float total = 0.0f;
        for (int64_t j = 0; j < keys; ++j) {
          if (scores[j] == 0.0f) continue;  // (a masked key, or one too unlikely to count)
          total += scores[j];
          accumulate(o, value + j * vs[2], scores[j], d_v);
        }
        const Vec inverse(1.0f / total);
        int64_t t = 0;
        for (; t + Vec::size() <= d_v; t += Vec::size()) (Vec::loadu(o + t) * inverse).store(o + t);
        for (; t < d_v; ++t) o[t] /= total;
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(scratchformer, CPU, m) {
  m.impl("few_query_attention", &few_query_attention);
}
