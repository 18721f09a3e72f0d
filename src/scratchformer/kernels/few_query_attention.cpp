// scratchformer::few_query_attention: softmax(q k^T * scale) v for a few queries a row, in
// float32, over keys and values that may be a slice of a cache (any strides but the last).
//
// q (batch, heads, queries, d); k, v (batch, kv_heads, keys, d), each kv head shared by
// heads / kv_heads consecutive query heads (grouped-query attention); mask (batch, heads,
// queries, keys), True where a query may attend (broadcast views: strides of 0). A query
// with no key allowed gets zeros. Each (row, head) is one task of ATen's parallel_for: its
// scores are dot products of the query with the keys, four keys at a time, then a softmax
// (the largest allowed score taken off, exp by ATen's vectors), then the weighted sum of
// the values, 64 features at a time held in registers. Keys and values are read once per
// query, in order, and asked for (prefetched) 16 rows ahead: a decoding step's cache comes
// from memory, and its reading is what bounds the kernel. A decoding step has one query a
// row, where PyTorch's flash kernel, which splits its work by blocks of queries, does worst.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;
constexpr float kNoScore = -std::numeric_limits<float>::infinity();

constexpr int64_t kKeys = 4;    // keys whose dot products are summed at once
constexpr int64_t kAhead = 16;  // rows of keys or values fetched ahead of the one in hand
constexpr int64_t kHeld = 8;    // vectors of weighted sums held in registers

// Ask for the `count` floats from `row` to come into the cache.
void prefetch(const float* row, int64_t count) {
  constexpr int64_t kLine = 64 / sizeof(float);  // floats a cache line
  for (int64_t i = 0; i < count; i += kLine) _mm_prefetch(reinterpret_cast<const char*>(row + i), _MM_HINT_T0);
}

// The sum of each of four vectors, as one 128-bit vector.
__m128 sum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 halves = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(halves), _mm256_extractf128_ps(halves, 1));
}

// scores[0..4) = the dot products of `query` with the four keys from `key`, `stride` apart.
void dots4(const float* query, const float* key, int64_t stride, int64_t d, float* scores) {
  Vec sums[kKeys] = {Vec(0.0f), Vec(0.0f), Vec(0.0f), Vec(0.0f)};
  int64_t i = 0;
  for (; i + Vec::size() <= d; i += Vec::size()) {
    const Vec x = Vec::loadu(query + i);
    for (int64_t r = 0; r < kKeys; ++r) sums[r] = at::vec::fmadd(x, Vec::loadu(key + r * stride + i), sums[r]);
  }
  _mm_storeu_ps(scores, sum4(sums[0], sums[1], sums[2], sums[3]));
  for (; i < d; ++i)
    for (int64_t r = 0; r < kKeys; ++r) scores[r] += query[i] * key[r * stride + i];
}

float dot(const float* a, const float* b, int64_t d) {
  Vec sums(0.0f);
  int64_t i = 0;
  for (; i + Vec::size() <= d; i += Vec::size()) sums = at::vec::fmadd(Vec::loadu(a + i), Vec::loadu(b + i), sums);
  float total = at::vec::vec_reduce_all<float>([](Vec& x, Vec& y) { return x + y; }, sums);
  for (; i < d; ++i) total += a[i] * b[i];
  return total;
}

// out[0..width) = the sum of weights[j] * value row j over the keys with a weight (a masked
// key, or one too unlikely to count, has none), for the first `width` features from
// `value`. kHeld whole vectors of features are summed in registers; fewer, in `out`.
void weighted_sum(float* out, const float* value, int64_t stride, const float* weights, int64_t keys,
                  int64_t width) {
  const bool held = width == kHeld * Vec::size();
  Vec sums[kHeld];
  for (int64_t t = 0; t < kHeld; ++t) sums[t] = Vec(0.0f);
  if (!held) std::fill(out, out + width, 0.0f);
  for (int64_t j = 0; j < keys; ++j) {
    if (weights[j] == 0.0f) continue;
    const float* row = value + j * stride;
    if (j + kAhead < keys) prefetch(row + kAhead * stride, width);
    const Vec weight(weights[j]);
    if (held) {
      for (int64_t t = 0; t < kHeld; ++t)
        sums[t] = at::vec::fmadd(weight, Vec::loadu(row + t * Vec::size()), sums[t]);
      continue;
    }
    int64_t i = 0;
    for (; i + Vec::size() <= width; i += Vec::size())
      at::vec::fmadd(weight, Vec::loadu(row + i), Vec::loadu(out + i)).store(out + i);
    for (; i < width; ++i) out[i] += weights[j] * row[i];
  }
  if (held)
    for (int64_t t = 0; t < kHeld; ++t) sums[t].store(out + t * Vec::size());
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
        int64_t j = 0;
        for (; j + kKeys <= keys; j += kKeys) {
          if (j + kAhead + kKeys <= keys)
            for (int64_t r = 0; r < kKeys; ++r) prefetch(key + (j + kAhead + r) * ks[2], d);
          dots4(query, key + j * ks[2], ks[2], d, scores.data() + j);
        }
        for (; j < keys; ++j) scores[j] = dot(query, key + j * ks[2], d);
        float most = kNoScore;
        for (j = 0; j < keys; ++j) {  // (a masked key's product, of whatever it holds, is dropped)
          scores[j] = allowed[j * ms[3]] ? scores[j] * float(scale) : kNoScore;
          most = std::max(most, scores[j]);
        }
        if (most == kNoScore) {  // no key allowed: zeros
          std::fill(o, o + d_v, 0.0f);
          continue;
        }
        at::vec::map([most](Vec x) { return (x - Vec(most)).exp(); }, scores.data(), scores.data(), keys);
        const float total = std::accumulate(scores.begin(), scores.end(), 0.0f);
        for (int64_t c = 0; c < d_v; c += kHeld * Vec::size())
          weighted_sum(o + c, value + c, vs[2], scores.data(), keys, std::min(kHeld * Vec::size(), d_v - c));
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
