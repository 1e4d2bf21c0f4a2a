// An attention problem's shape check (src/core/attention_shape.hpp).
#include "core/attention_shape.hpp"

#include <string>

#include "ffn/types.hpp"

namespace ffn {

void check_attention_shape(const AttentionShape& a) {
  if (a.kv_heads < 0 || (a.kv_heads > 0 && a.heads % a.kv_heads != 0))
    throw Error("attention: " + std::to_string(a.heads) + " query heads cannot share " + std::to_string(a.kv_heads) +
                " key/value heads (kv_heads must divide heads)");
  if (a.kv_heads > 0 && a.kv_heads != a.heads && a.training)
    throw Error("attention: grouped-query attention (kv_heads < heads) is inference only");
  const size_t B = a.off.empty() ? 0 : a.off.size() - 1;
  if (a.kv_pages) {
    if (a.training) throw Error("attention: paged keys are inference only");
    if (a.kv_page < 1 || a.kv_pages->size() != B || a.kv_len.size() != B)
      throw Error("attention: " + std::to_string(B) + " sequences but " + std::to_string(a.kv_pages->size()) +
                  " page lists of " + std::to_string(a.kv_page) + " positions and " + std::to_string(a.kv_len.size()) +
                  " key lengths");
    for (size_t b = 0; b < B; ++b)
      if (int64_t((*a.kv_pages)[b].size()) * a.kv_page < a.kv_len[b])
        throw Error("attention: sequence " + std::to_string(b) + " has " + std::to_string(a.kv_len[b]) +
                    " keys but pages for " + std::to_string(int64_t((*a.kv_pages)[b].size()) * a.kv_page));
  } else if (!a.kv_base.empty() || !a.kv_len.empty()) {
    if (a.kv_base.size() != B || a.kv_len.size() != B)
      throw Error("attention: " + std::to_string(B) + " sequences but " + std::to_string(a.kv_base.size()) +
                  " key bases and " + std::to_string(a.kv_len.size()) + " key lengths");
  }
  if (a.window < 0 || !(a.softcap >= 0) || !(a.scale >= 0))
    throw Error("attention: window, soft-cap and scale must be at least 0");
  if (a.window > 0 && !a.causal) throw Error("attention: a sliding window is for causal attention");
  if (a.local < 0 || (a.local > 0 && a.causal))
    throw Error("attention: a local window (local) is for non-causal attention and at least 0");
  if (a.training && (a.window > 0 || a.local > 0 || a.softcap > 0 || a.scale > 0 || a.rel_bias))
    throw Error("attention: a sliding or local window, a soft-cap, a query scale and a relative position bias are inference only");
  if (a.rel_bias && a.rel_span < 1) throw Error("attention: a relative position bias needs a span of at least 1");
  for (size_t b = 0; b < B; ++b) {
    const int64_t q = a.q_len(b), k = a.keys_len(b);
    if (k < 0 || (q > 0 && k == 0))
      throw Error("attention: sequence " + std::to_string(b) + " has " + std::to_string(q) + " queries and no keys");
    if (a.rel_bias && k > a.rel_span)
      throw Error("attention: sequence " + std::to_string(b) + " has " + std::to_string(k) +
                  " keys, past the relative position bias's span of " + std::to_string(a.rel_span));
    if (a.causal && k < q)
      throw Error("attention: causal sequence " + std::to_string(b) + " has " + std::to_string(q) +
                  " queries but only " + std::to_string(k) + " keys (the queries are the last positions)");
  }
}

}  // namespace ffn
