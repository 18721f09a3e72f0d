// scratchformer::int8_matmul: a float32 input times int8 weights, in int8 x int8 products.
//
// Each row of the input is quantized on the fly, symmetric, to 7 bits: scale = max|x| / 63,
// q = round(x / scale) in [-63, 63] (to nearest, ties to even, as torch.round); a row of
// zeros keeps zeros. Then out[m, n] = (sum_k q[m, k] * weight[n, k]) * scale[m] * scales[n],
// the sum exact in int32. The products are AVX2's vpmaddubsw, 32 an instruction, which
// multiplies unsigned by signed bytes: the weight, offset by 128 (its top bit flipped), is
// the unsigned operand, so that sum_k (weight[n, k] + 128) * q[m, k] is summed, less
// 128 * sum_k q[m, k] afterwards. Two products of at most 255 * 63 sum within int16, so
// nothing saturates, for any int8 weight. Seven bits rather than eight are what allow the
// offset: with eight, two products could exceed int16, and each product would need the
// sign of one operand moved to the other first (vpsignb), an instruction more per product
// in the loop that bounds the speed (docs/lab-notes.md, "Seven-bit inputs").
//
// One input row (a decoding step) reads one weight row at a time: a single stream from
// memory, which is what bounds it, with two sums in flight. More rows are multiplied in
// tiles of 2 rows by 4 weight rows, 8 sums in registers, so that each loaded vector serves
// several products; the first tile of each 4 weight rows asks for the next 4 (prefetch),
// so that they come from memory while these are multiplied by every input row (a single
// row's stream the CPU prefetches well on its own; docs/lab-notes.md, "Prefetched weights").
// python benchmarks/int8.py times both.
//
// The operator's schema is defined in library.py; this file gives its CPU kernel.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

constexpr int64_t kTileRows = 2;     // input rows of a tile
constexpr int64_t kTileColumns = 4;  // weight rows of a tile
constexpr int64_t kGrain = 16;       // the fewest weight rows a thread takes
constexpr float kLevels = 63.0f;     // the input's largest magnitude, quantized
constexpr int32_t kOffset = 128;     // added to the weights, as unsigned bytes
constexpr int64_t kVector = 32;      // bytes of a vector: the products of one instruction

// The columns multiplied in whole vectors; the offset's correction covers these alone.
int64_t whole_columns(int64_t k) { return k / kVector * kVector; }

// 32 weights from `weight`, offset by 128 to unsigned bytes (the top bit flipped).
__m256i offset_weights(const int8_t* weight) {
  return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(weight)), _mm256_set1_epi8(char(0x80)));
}

// `sum` plus the 32 products of offset weights and input bytes, in 8 int32 lanes.
__m256i add_products(__m256i sum, __m256i weights, __m256i inputs) {
  return _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(weights, inputs), _mm256_set1_epi16(1)));
}

int32_t horizontal_sum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// Row `x` of length k as int8 values `q` in [-63, 63]; returns its scale, and in `offset`
// what the weights' offset adds to its products over the whole vectors (kOffset * sum q).
float quantize_row(const float* x, int8_t* q, int32_t* offset, int64_t k) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  __m256 most = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) most = _mm256_max_ps(most, _mm256_andnot_ps(sign_bit, _mm256_loadu_ps(x + i)));
  float lanes[8];
  _mm256_storeu_ps(lanes, most);
  float amax = *std::max_element(lanes, lanes + 8);
  for (; i < k; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / kLevels;
  const float divisor = scale > 0.0f ? scale : 1.0f;
  const __m256 d = _mm256_set1_ps(divisor);
  const int64_t whole = whole_columns(k);
  __m256i sum = _mm256_setzero_si256();
  for (i = 0; i + 8 <= k; i += 8) {
    const __m256 rounded = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), d),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i v = _mm256_cvtps_epi32(rounded);
    if (i < whole) sum = _mm256_add_epi32(sum, v);
    const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(words, words));
  }
  for (; i < k; ++i) q[i] = static_cast<int8_t>(std::nearbyint(x[i] / divisor));
  *offset = kOffset * horizontal_sum(sum);
  return scale;
}

// The sums of four vectors of int32, in one vector.
__m128i sum4(const __m256i* v) {
  const __m256i halves = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  return _mm_add_epi32(_mm256_castsi256_si128(halves), _mm256_extracti128_si256(halves, 1));
}

// The products of the columns beyond whole vectors, from `whole` to k, for C weight rows.
template <int C>
std::array<int32_t, C> remainders(const int8_t* q, const int8_t* weight, int64_t whole, int64_t k) {
  std::array<int32_t, C> sums{};
  for (int c = 0; c < C; ++c)
    for (int64_t i = whole; i < k; ++i) sums[c] += int32_t(q[i]) * int32_t(weight[c * k + i]);
  return sums;
}

struct Operands {
  const int8_t* q;          // (rows, k): the input's int8 values
  const int32_t* offsets;   // (rows,): what the weights' offset adds to each row's sums
  const float* q_scales;    // (rows,)
  const int8_t* weight;     // (n_total, k)
  const float* scales;      // (n_total,)
  float* out;               // (rows, n_total)
  int64_t k, n_total;
};

// out[m + r, n + c] for the R input rows from m and the C weight rows from n; with
// Prefetch, the C weight rows after these are fetched into the cache meanwhile.
template <int R, int C, bool Prefetch = false>
void tile(const Operands& o, int64_t m, int64_t n) {
  const int64_t k = o.k, whole = whole_columns(k);
  const int8_t* q = o.q + m * k;
  const int8_t* weight = o.weight + n * k;
  __m256i sums[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) sums[r][c] = _mm256_setzero_si256();
  for (int64_t i = 0; i < whole; i += kVector) {
    __m256i inputs[R];
    for (int r = 0; r < R; ++r) inputs[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + r * k + i));
    for (int c = 0; c < C; ++c) {
      const __m256i w = offset_weights(weight + c * k + i);
      if constexpr (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(weight + (C + c) * k + i), _MM_HINT_T0);
      for (int r = 0; r < R; ++r) sums[r][c] = add_products(sums[r][c], w, inputs[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const float q_scale = o.q_scales[m + r];
    const int32_t offset = o.offsets[m + r];
    float* out = o.out + (m + r) * o.n_total + n;
    const std::array<int32_t, C> tails = remainders<C>(q + r * k, weight, whole, k);
    if constexpr (C == 4) {  // four sums at once, scaled and stored as one vector
      const __m128i totals = _mm_sub_epi32(
          _mm_add_epi32(sum4(sums[r]), _mm_loadu_si128(reinterpret_cast<const __m128i*>(tails.data()))),
          _mm_set1_epi32(offset));
      const __m128 scales = _mm_mul_ps(_mm_loadu_ps(o.scales + n), _mm_set1_ps(q_scale));
      _mm_storeu_ps(out, _mm_mul_ps(_mm_cvtepi32_ps(totals), scales));
    } else {
      for (int c = 0; c < C; ++c)
        out[c] = float(horizontal_sum(sums[r][c]) + tails[c] - offset) * (o.scales[n + c] * q_scale);
    }
  }
}

// out[0, n] for a single input row: 64 bytes a step into two sums, so that two chains of
// products are in flight rather than one waiting on each addition.
void single_row(const Operands& o, int64_t n) {
  const int64_t k = o.k, whole = whole_columns(k);
  const int8_t* weight = o.weight + n * k;
  __m256i sums[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  for (int64_t i = 0; i < whole; i += 2 * kVector) {
    for (int half = 0; half < 2 && i + kVector * half < whole; ++half) {
      const int64_t at = i + kVector * half;
      const __m256i input = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o.q + at));
      sums[half] = add_products(sums[half], offset_weights(weight + at), input);
    }
  }
  const int32_t total = horizontal_sum(_mm256_add_epi32(sums[0], sums[1])) + remainders<1>(o.q, weight, whole, k)[0];
  o.out[n] = float(total - o.offsets[0]) * (o.scales[n] * o.q_scales[0]);
}

// Every input row times the weight rows n0 .. n1.
void multiply(const Operands& o, int64_t rows, int64_t n0, int64_t n1) {
  if (rows == 1) {
    for (int64_t n = n0; n < n1; ++n) single_row(o, n);
    return;
  }
  int64_t n = n0;
  for (; n + kTileColumns <= n1; n += kTileColumns) {  // a weight tile stays in L1 meanwhile
    const bool next = n + 2 * kTileColumns <= n1;  // a whole tile follows, to prefetch
    int64_t m = 0;
    if (next && rows >= kTileRows) {
      tile<kTileRows, kTileColumns, true>(o, m, n);
      m += kTileRows;
    }
    for (; m + kTileRows <= rows; m += kTileRows) tile<kTileRows, kTileColumns>(o, m, n);
    if (m < rows) tile<1, kTileColumns>(o, m, n);
  }
  for (; n < n1; ++n) {
    for (int64_t m = 0; m < rows; ++m) tile<1, 1>(o, m, n);
  }
}

at::Tensor int8_matmul(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& scales) {
  TORCH_CHECK(input.device().is_cpu() && input.scalar_type() == at::kFloat,
              "int8_matmul: input must be float32 on the CPU, not ", input.scalar_type(), " on ",
              input.device());
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kChar && weight.device().is_cpu(),
              "int8_matmul: weight must be int8 (out, in) on the CPU");
  TORCH_CHECK(input.size(-1) == weight.size(1), "int8_matmul: input has ", input.size(-1),
              " features, weight takes ", weight.size(1));
  TORCH_CHECK(scales.dim() == 1 && scales.size(0) == weight.size(0) && scales.scalar_type() == at::kFloat,
              "int8_matmul: scales must be float32 (out,)");
  const int64_t k = weight.size(1), n_total = weight.size(0);
  const at::Tensor x = input.reshape({-1, k}).contiguous();
  const at::Tensor w = weight.contiguous(), s = scales.contiguous();
  const int64_t rows = x.size(0);
  at::Tensor q = at::empty({rows, k}, x.options().dtype(at::kChar));
  at::Tensor offsets = at::empty({rows}, x.options().dtype(at::kInt));
  at::Tensor q_scales = at::empty({rows}, x.options());
  at::Tensor out = at::empty({rows, n_total}, x.options());
  const Operands o{q.data_ptr<int8_t>(), offsets.data_ptr<int32_t>(), q_scales.data_ptr<float>(),
                   w.data_ptr<int8_t>(), s.data_ptr<float>(), out.data_ptr<float>(), k, n_total};
  const float* x_data = x.data_ptr<float>();
  int8_t* q_data = q.data_ptr<int8_t>();
  int32_t* offset_data = offsets.data_ptr<int32_t>();
  float* q_scale_data = q_scales.data_ptr<float>();
  at::parallel_for(0, rows, kGrain, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      q_scale_data[m] = quantize_row(x_data + m * k, q_data + m * k, offset_data + m, k);
  });
  at::parallel_for(0, n_total, kGrain, [&](int64_t n0, int64_t n1) { multiply(o, rows, n0, n1); });
  std::vector<int64_t> shape = input.sizes().vec();
  shape.back() = n_total;
  return out.view(shape);
}

}  // namespace

TORCH_LIBRARY_IMPL(scratchformer, CPU, m) {
  m.impl("int8_matmul", &int8_matmul);
}
